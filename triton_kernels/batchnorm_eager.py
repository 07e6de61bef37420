"""The eager fast path of the fused batch norm (triton_kernels/batchnorm.py): a call whose signature (every
tensor's shape, strides, dtype and device; relu; two_outputs, second_stride) was seen before skips
validation, layout analysis and plan lookups. Training runs as two allocations (three with the relu bits of
a residual layer) + two launches forward and up to three allocations + two launches backward through
``_Node`` (a runtime.EagerNode; a double backward runs batchnorm.backward_ops, as the registered op), the
reductions' scratch reused per stream (stream_buffers.stream_buffers); inference as one allocation + one launch;
batchnorm.batch_norm_pair's two known calls as one node (_FastPair): three launches forward, two backward.
The first call of a signature takes the general path (which validates, tunes and makes the plans) and is
remembered here when its layout is the simple one: x dense, the residual in x's strides, contiguous
parameters and running statistics. torch.compile always traces the registered ops.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .batchnorm import (_PLANS, _Geometry, _apply_flags, _dense_strides, _dx_flags, _launch_planned, _memory_format,
                        _pixel_strides, _reduce_flags, _stats_flags, backward_ops, batch_norm_train_backward, plan_key,
                        relu_bits)
from .batchnorm_kernels import _bn_apply_kernel
from .runtime import EagerNode, cdiv, is_fake as _is_fake, is_tracing, remember_call
from .stream_buffers import stream_buffers


def _signature(t: Optional[torch.Tensor]):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _key(x, running_mean, running_var, weight, bias, residual, relu, two_outputs: bool = False,
         second_stride: int = 1) -> tuple:
    """A call's signature: every tensor's shape, strides, dtype and device, relu, two_outputs, second_stride."""
    return (_signature(x), _signature(weight), _signature(bias), _signature(residual), _signature(running_mean),
            _signature(running_var), bool(relu), two_outputs, second_stride)


def add_second(dy: torch.Tensor, dy2: torch.Tensor, stride: int) -> torch.Tensor:
    """y's whole gradient from the gradients of its two outputs, y and y2 = y[:, :, ::stride, ::stride]."""
    if stride == 1:
        return dy + dy2
    dy = dy.clone()
    dy[:, :, ::stride, ::stride] += dy2
    return dy


class _FastTrain:
    """What a training call's signature (every tensor's shape, strides, dtype and device; relu; two_outputs,
    second_stride) fixes: the layout, the geometry's launch arguments and the plans of its kernels (the
    forward's from the first call, or with a second_stride > 1 the apply's from the first fast call; the
    backward's from the first backward per (need_dx, store_g, two gradients)). Kernels launch through fixed
    launch functions (launcher.BoundKernel.fix: every argument but the tensors bound) made at the first fast
    call; the reductions' partials and the dx coefficients live in the stream's scratch. With a second_stride
    > 1 the apply kernel also writes y2 = y[:, :, ::stride, ::stride] (dense channels_last), and the backward
    kernels add its gradient where it lands."""

    MAX_FIXED = 4  # (momentum, eps) pairs with a fixed statistics launch; others take the general launch

    def __init__(self, x, weight, bias, residual, running_mean, relu: bool, two_outputs: bool = False,
                 second_stride: int = 1):
        fmt = _memory_format(x)
        self.fmt, self.shape = fmt, tuple(x.shape)
        geo = self.geo = _Geometry(self.shape, _pixel_strides(x))
        self.out_strides = x.stride()
        self.relu, self.has_res, self.mask_from_bits = relu, residual is not None, relu and residual is not None
        self.has_running = running_mean is not None
        self.two_outputs, self.second_stride = two_outputs, second_stride
        N, C, H, W = self.shape
        self.second_shape = (N, C, cdiv(H, second_stride), cdiv(W, second_stride))
        self.second_strides = _dense_strides(self.second_shape, torch.channels_last) if second_stride > 1 \
            else self.out_strides
        self.w_dtype = weight.dtype if weight is not None and weight.dtype != torch.float32 else None
        self.b_dtype = bias.dtype if bias is not None and bias.dtype != torch.float32 else None
        dev, C = x.device, geo.C
        self.stats = _PLANS[plan_key("stats", geo, x.dtype, _stats_flags(weight is not None, bias is not None,
                                                                          self.has_running), dev)]
        # the apply's flags, [plan, fixed launch] per res_norm (a residual normalised in the apply: _FastPair)
        self.apply_flags = {n: _apply_flags(self.has_res, relu, store_bits=self.mask_from_bits,
                                            second_stride=second_stride, res_norm=n) for n in (False, True)}
        self.applies = {n: [_PLANS.get(plan_key("apply", geo, x.dtype, self.apply_flags[n], dev)), None]
                        for n in (False, True)}
        if self.applies[False][0] is None and second_stride == 1:
            raise KeyError("apply")  # the general call kept no plan (an explicit config)
        self.geo_args = (C, geo.HW, *geo.strides)
        self.part_size = 3 * self.stats.groups * C
        self.stats_launches: dict[tuple, object] = {}  # (momentum, eps) -> fixed launch
        # (need_dx, store_g, has_dy2, pair) -> [reduce plan, dx plan, fixed launches]
        self.backward_plans: dict[tuple, list] = {}

    def run(self, x, weight, bias, residual, running_mean, running_var, momentum: float, eps: float,
            res_stats=None):
        """(y, y2 (second_stride > 1) or None, stats (5, C) fp32, the relu bits or None) of a training call; the
        running statistics are updated in place. ``res_stats``: the residual is the input of a batch norm with
        these statistics, normalised by the apply kernel (_FastPair)."""
        stats = self.batch_stats(x, weight, bias, running_mean, running_var, momentum, eps)
        return self.apply(x, residual, stats, res_stats)

    def batch_stats(self, x, weight, bias, running_mean, running_var, momentum: float, eps: float):
        """The statistics launch: stats (5, C) fp32; the running statistics are updated in place."""
        geo, stats_plan = self.geo, self.stats
        stats = x.new_empty((5, geo.C), dtype=torch.float32)
        part, counters, _ = stream_buffers(x, self.part_size, stats_plan.grid[1])
        w = weight if weight is not None else stats
        b = bias if bias is not None else stats
        rm = running_mean if self.has_running else stats
        rv = running_var if self.has_running else stats
        launch = self.stats_launches.get((momentum, eps))
        if launch is not None:
            launch(x, part, counters, w, b, stats, rm, rv, rm, rv)
        else:
            args = (x, part, *self.geo_args, *stats_plan.scalars, counters, w, b, stats, rm, rv, rm, rv, geo.M, eps,
                    momentum)
            if len(self.stats_launches) < self.MAX_FIXED:
                self.stats_launches[(momentum, eps)] = stats_plan.kernel.fix(stats_plan.grid, *args)
            stats_plan.kernel.launch(stats_plan.grid, *args)
        return stats

    def apply(self, x, residual, stats, res_stats=None):
        """The apply launch: (y, y2 or None, stats, bits or None); see run."""
        geo = self.geo
        y = x.new_empty_strided(self.shape, self.out_strides)
        res = residual if residual is not None else x
        bits = relu_bits(x, geo) if self.mask_from_bits else None
        bits_or_y = bits if bits is not None else y
        y2 = x.new_empty_strided(self.second_shape, self.second_strides) if self.second_stride > 1 else None
        y2_or_y = y2 if y2 is not None else y
        norm = res_stats is not None
        res_stats = res_stats if norm else stats
        entry = self.applies[norm]
        if entry[1] is None:
            if entry[0] is None:  # a variant's first call (a second output, a normalised residual): the general
                flags = self.apply_flags[norm]  # launcher makes the plan
                _launch_planned("apply", _bn_apply_kernel, geo, (x, res, y, bits_or_y, y2_or_y, stats, res_stats),
                                x.dtype, flags, x.device, None, (stats, stats, stats, stats, 0.0, *geo.image))
                entry[0] = _PLANS[plan_key("apply", geo, x.dtype, flags, x.device)]
                return y, y2, stats, bits
            plan = entry[0]
            entry[1] = plan.kernel.fix(plan.grid, x, res, y, bits_or_y, y2_or_y, stats, res_stats, *self.geo_args,
                                       *plan.scalars, stats, stats, stats, stats, 0.0, *geo.image)
        entry[1](x, res, y, bits_or_y, y2_or_y, stats, res_stats, stats, stats, stats, stats)
        return y, y2, stats, bits

    def run_backward(self, dy, x, bits, stats, need_dx: bool, store_g: bool, dy2=None, pair=None):
        """(dx or None, g or None, dwb (2, C) fp32, res_dx, res_dwb); ``dy2``: the gradient's second part
        (two_outputs); ``pair``: (res_x, res_stats) of the batch norm whose output was this layer's residual
        (_FastPair, with need_dx and store_g): its input gradient and dweight, dbias come from the same two
        kernels (PAIR), else res_dx = res_dwb = None."""
        if dy.stride() != self.out_strides:
            dy = dy.contiguous(memory_format=self.fmt)
        has_dy2, is_pair = dy2 is not None, pair is not None
        if has_dy2 and dy2.stride() != self.second_strides:
            dy2 = dy2.contiguous(memory_format=self.fmt if self.second_stride == 1 else torch.channels_last)
        geo, dev, relu, from_bits = self.geo, x.device, self.relu, self.mask_from_bits
        key = (need_dx, store_g, has_dy2, is_pair)
        entry = self.backward_plans.get(key)
        if entry is None:  # the general path tunes / finds the plans, then they are kept here
            stride = self.second_stride if has_dy2 else 1
            out = batch_norm_train_backward(dy, x, bits, stats, relu, need_dx, store_g, dy2=dy2, second_stride=stride,
                                            pair=pair)
            self.backward_plans[key] = [
                _PLANS[plan_key("bwd_reduce", geo, dy.dtype,
                                _reduce_flags(relu, from_bits, store_g, has_dy2, stride, is_pair), dev)],
                _PLANS[plan_key("bwd_dx", geo, x.dtype, _dx_flags(relu, from_bits, store_g, has_dy2, stride, is_pair),
                                dev)] if need_dx else None, None]
            return out if is_pair else (*out, None, None)
        g = x.new_empty_strided(self.shape, self.out_strides, dtype=dy.dtype) if store_g else None
        dwb = x.new_empty((2 if not is_pair else 4, geo.C), dtype=torch.float32)
        dx = x.new_empty_strided(self.shape, self.out_strides) if need_dx else None
        res_x, res_stats = pair if is_pair else (x, stats)
        res_dx = x.new_empty_strided(self.shape, self.out_strides) if is_pair else dx
        res_dwb = dwb[-2:]  # a pair's last two rows, else a placeholder (as in batch_norm_train_backward)
        bits_or_x = bits if bits is not None else x
        g_or_dy = g if g is not None else dy
        dy2 = dy2 if has_dy2 else dy
        reduce_plan, dx_plan, launches = entry
        part, counters, coef = stream_buffers(x, reduce_plan.rows * reduce_plan.groups * geo.C, reduce_plan.grid[1],
                                              4 * geo.C)
        res_coef = coef[2 * geo.C:]
        if launches is None:
            launches = entry[2] = (
                reduce_plan.kernel.fix(reduce_plan.grid, dy, dy2, x, bits_or_x, g_or_dy, stats, part, *self.geo_args,
                                       *reduce_plan.scalars, counters, coef, dwb, geo.M, *geo.image, res_x, res_stats,
                                       res_coef, res_dwb),
                dx_plan.kernel.fix(dx_plan.grid, dy, dy2, g_or_dy, x, bits_or_x, dx, stats, coef, *self.geo_args,
                                   *dx_plan.scalars, *geo.image, res_x, res_stats, res_coef, res_dx)
                if need_dx else None)
        launches[0](dy, dy2, x, bits_or_x, g_or_dy, stats, part, counters, coef, dwb, res_x, res_stats, res_coef,
                    res_dwb)
        if need_dx:
            launches[1](dy, dy2, g_or_dy, x, bits_or_x, dx, stats, coef, res_x, res_stats, res_coef, res_dx)
        return dx, g, dwb[:2], (res_dx if is_pair else None), (res_dwb if is_pair else None)

    # the autograd node's (_Node, a runtime.EagerNode) forward and backwards, on (x, weight, bias, residual,
    # running_mean, running_var, momentum, eps)
    def forward(self, ctx, x, weight, bias, residual, running_mean, running_var, momentum, eps):
        y, y2, stats, bits = self.run(x, weight, bias, residual, running_mean, running_var, momentum, eps)
        ctx.save_for_backward(x, bits, stats)
        # two outputs: autograd hands their gradients to backward() separately (y2 a view of y, or its own)
        return (y, y2 if y2 is not None else y.view_as(y)) if self.two_outputs else y

    def backward(self, ctx, dy, dy2=None):
        x, bits, stats = ctx.saved_tensors
        need_x, need_w, need_b, need_res = ctx.needs_input_grad[1:5]
        store_g = bool(need_res and self.relu)
        dx, g, dwb, _, _ = self.run_backward(dy, x, bits, stats, bool(need_x), store_g, dy2)
        if need_res and not store_g and dy2 is not None:
            dy = add_second(dy, dy2, self.second_stride)
        return dx, *self.param_grads(dwb, need_w, need_b), (g if store_g else dy) if need_res else None, \
            None, None, None, None

    def param_grads(self, dwb, need_w, need_b) -> tuple:
        """(dweight, dbias) in the parameters' dtypes from dwb (2, C) fp32, None where not needed."""
        dw = db = None
        if need_w:
            dw = dwb[0] if self.w_dtype is None else dwb[0].to(self.w_dtype)
        if need_b:
            db = dwb[1] if self.b_dtype is None else dwb[1].to(self.b_dtype)
        return dw, db

    def general_backward(self, ctx, dy, dy2=None):
        """The registered op's backward (batchnorm.backward_ops): a double backward."""
        x, bits, stats = ctx.saved_tensors
        dy = dy if dy2 is None else add_second(dy, dy2, self.second_stride)
        needs = tuple(bool(n) for n in ctx.needs_input_grad[1:5])
        dtypes = (self.w_dtype or torch.float32, self.b_dtype or torch.float32)
        return *backward_ops(dy, x, bits, stats, self.relu, needs, "", dtypes), None, None, None, None


class _Node(EagerNode):
    """The autograd node of an eager training call of a known signature."""


_FAST: dict[tuple, _FastTrain] = {}


def _plain_call(x, momentum, eps) -> bool:
    """Whether a call may take a fast path: not traced by torch.compile, x real, momentum a float in [0, 1] and
    eps a finite float >= 0 (anything else the general path validates)."""
    return not (torch.compiler.is_compiling() or _is_fake(x)) and type(momentum) is float and 0.0 <= momentum <= 1.0 \
        and type(eps) is float and 0.0 <= eps < float("inf")


def fast_train(x, running_mean, running_var, weight, bias, momentum, eps, residual, relu, two_outputs: bool = False,
               second_stride: int = 1):
    """The output of a training call through the fast path (with two_outputs and autograd, or a second_stride,
    (y, y2)), or None when the call must take the general one (first call of its signature, tracing, an unusual
    layout, a momentum or eps to validate)."""
    if not _plain_call(x, momentum, eps):
        return None
    key = _key(x, running_mean, running_var, weight, bias, residual, relu, two_outputs, second_stride)
    fast = _FAST.get(key)
    if fast is None:
        return None
    if torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                    or (bias is not None and bias.requires_grad)
                                    or (residual is not None and residual.requires_grad)):
        return _Node.run(fast, x, weight, bias, residual, running_mean, running_var, momentum, eps)
    y, y2, _, _ = fast.run(x, weight, bias, residual, running_mean, running_var, momentum, eps)
    return y if y2 is None else (y, y2)


class _FastPair:
    """act(bn(x) + bn_r(res_x)) for two known training signatures (a ResNet block's last batch norm with its
    shortcut's, whose output only this add reads): the shortcut's statistics launch, the block's, then one apply
    normalises both (RES_NORM), so the shortcut's output is never written nor read back. The backward runs the
    block's kernels (writing g, the shortcut output's gradient), then the shortcut's on g."""

    def __init__(self, main: _FastTrain, res: _FastTrain):
        self.main, self.res = main, res

    # the autograd node's (_PairNode) functions, on (x, weight, bias, res_x, res_weight, res_bias, running_mean,
    # running_var, res_mean, res_var, momentum, eps, res_momentum, res_eps)
    def forward(self, ctx, x, weight, bias, res_x, res_weight, res_bias, running_mean, running_var, res_mean, res_var,
                momentum, eps, res_momentum, res_eps):
        res_stats = self.res.batch_stats(res_x, res_weight, res_bias, res_mean, res_var, res_momentum, res_eps)
        y, y2, stats, bits = self.main.run(x, weight, bias, res_x, running_mean, running_var, momentum, eps,
                                           res_stats)
        ctx.save_for_backward(x, bits, stats, res_x, res_stats)
        return (y, y2 if y2 is not None else y.view_as(y)) if self.main.two_outputs else y

    def backward(self, ctx, dy, dy2=None):
        x, bits, stats, res_x, res_stats = ctx.saved_tensors
        need_x, need_w, need_b, need_rx, need_rw, need_rb = (bool(n) for n in ctx.needs_input_grad[1:7])
        need_res, main = need_rx or need_rw or need_rb, self.main
        if need_x and need_rx and main.relu:  # both input gradients from one reduce and one dx launch
            dx, _, dwb, dres_x, res_dwb = main.run_backward(dy, x, bits, stats, True, True, dy2, (res_x, res_stats))
            return (dx, *main.param_grads(dwb, need_w, need_b), dres_x,
                    *self.res.param_grads(res_dwb, need_rw, need_rb)) + (None,) * 8
        dx, g, dwb, _, _ = main.run_backward(dy, x, bits, stats, need_x, need_res and main.relu, dy2)
        if need_res and not main.relu:
            g = dy if dy2 is None else add_second(dy, dy2, main.second_stride)
        dres_x, res_grads = None, (None, None)
        if need_res:
            dres_x, _, res_dwb, _, _ = self.res.run_backward(g, res_x, None, res_stats, need_rx, False)
            res_grads = self.res.param_grads(res_dwb, need_rw, need_rb)
        return (dx, *main.param_grads(dwb, need_w, need_b), dres_x, *res_grads) + (None,) * 8

    def general_backward(self, ctx, dy, dy2=None):
        """A double backward: the registered op's backward (batchnorm.backward_ops) for each batch norm."""
        x, bits, stats, res_x, res_stats = ctx.saved_tensors
        dy = dy if dy2 is None else add_second(dy, dy2, self.main.second_stride)
        needs = tuple(bool(n) for n in ctx.needs_input_grad[1:7])
        main, res = self.main, self.res
        dx, dw, db, g = backward_ops(dy, x, bits, stats, main.relu, (*needs[:3], any(needs[3:])), "",
                                     (main.w_dtype or torch.float32, main.b_dtype or torch.float32))
        res_grads = (None, None, None) if g is None else backward_ops(
            g, res_x, None, res_stats, False, (*needs[3:], False), "",
            (res.w_dtype or torch.float32, res.b_dtype or torch.float32))[:3]
        return (dx, dw, db, *res_grads) + (None,) * 8


class _PairNode(EagerNode):
    """The autograd node of an eager batch norm pair (batchnorm.batch_norm_pair) of known signatures."""


_PAIRS: dict[tuple, _FastPair] = {}


def fast_pair(x, res_x, running_mean, running_var, weight, bias, res_mean, res_var, res_weight, res_bias, momentum,
              eps, res_momentum, res_eps, relu, two_outputs: bool = False, second_stride: int = 1):
    """batchnorm.batch_norm_pair through the fast path with autograd, or None when either batch norm's signature
    is not known yet (its general calls come first), or the call must take the general path (see fast_train)."""
    if not (torch.is_grad_enabled() and _plain_call(x, momentum, eps) and _plain_call(res_x, res_momentum, res_eps)):
        return None
    key = (_key(x, running_mean, running_var, weight, bias, res_x, relu, two_outputs, second_stride),
           _key(res_x, res_mean, res_var, res_weight, res_bias, None, False))
    pair = _PAIRS.get(key)
    if pair is None:
        main, res = _FAST.get(key[0]), _FAST.get(key[1])
        if main is None or res is None:
            return None
        pair = remember_call(_PAIRS, key, _FastPair(main, res))
    return _PairNode.run(pair, x, weight, bias, res_x, res_weight, res_bias, running_mean, running_var, res_mean,
                         res_var, momentum, eps, res_momentum, res_eps)


def _simple_layout(x, running_mean, running_var, weight, bias, residual) -> bool:
    """x dense (channels_last or NCHW), the residual in x's strides, contiguous parameters and running
    statistics: the layouts the fast path launches on as they are; not while tracing."""
    return not (is_tracing(x)
                or _pixel_strides(x) != _pixel_strides(x, _dense_strides(tuple(x.shape), _memory_format(x)))
                or (residual is not None and residual.stride() != x.stride())
                or any(t is not None and not t.is_contiguous() for t in (weight, bias, running_mean, running_var)))


def remember_train(x, running_mean, running_var, weight, bias, residual, relu, two_outputs: bool = False,
                   second_stride: int = 1) -> None:
    """After a general-path training call: keep its signature for the fast path (simple layouts only)."""
    if not _simple_layout(x, running_mean, running_var, weight, bias, residual):
        return
    key = _key(x, running_mean, running_var, weight, bias, residual, relu, two_outputs, second_stride)
    try:
        remember_call(_FAST, key, _FastTrain(x, weight, bias, residual, running_mean, relu, two_outputs,
                                             second_stride))
    except KeyError:  # a plan was not kept (explicit config): no fast path
        pass


class _FastInfer(NamedTuple):
    """An inference signature's apply plan, output layout and geometry arguments (before the plan's scalars, and
    the image's height and width after the kernel's other arguments)."""
    plan: object
    shape: tuple
    strides: tuple
    geo_args: tuple
    image: tuple


_FAST_INFER: dict[tuple, _FastInfer] = {}


def fast_infer(x, running_mean, running_var, weight, bias, eps, residual, relu) -> Optional[torch.Tensor]:
    """The output of an inference call (no gradient needed) through the fast path, or None (see fast_train)."""
    if not _plain_call(x, 0.0, eps):
        return None
    fast = _FAST_INFER.get(_key(x, running_mean, running_var, weight, bias, residual, relu))
    if fast is None:
        return None
    y = x.new_empty_strided(fast.shape, fast.strides)
    fast.plan.kernel.launch(fast.plan.grid, x, residual if residual is not None else x, y, y, y, x, x, *fast.geo_args,
                            *fast.plan.scalars, running_mean, running_var,
                            weight if weight is not None else running_mean,
                            bias if bias is not None else running_mean, eps, *fast.image)
    return y


def remember_infer(x, running_mean, running_var, weight, bias, residual, relu) -> None:
    """After a general-path inference call: keep its signature for the fast path (simple layouts only)."""
    if not _simple_layout(x, running_mean, running_var, weight, bias, residual):
        return
    geo = _Geometry(tuple(x.shape), _pixel_strides(x))
    flags = _apply_flags(residual is not None, bool(relu), True, weight is not None, bias is not None)
    plan = _PLANS.get(plan_key("apply", geo, x.dtype, flags, x.device))
    if plan is not None:
        remember_call(_FAST_INFER, _key(x, running_mean, running_var, weight, bias, residual, relu),
                      _FastInfer(plan, tuple(x.shape), x.stride(), (geo.C, geo.HW, *geo.strides), geo.image))
