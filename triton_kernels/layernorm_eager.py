"""The eager calls of LayerNorm (triton_kernels/layernorm.py's ``layer_norm``): one prepared call per call
signature, validated once by layer_norm. Its first call finds the plans; later calls allocate the outputs and
launch the row kernels with every other argument fixed (launcher.BoundKernel.fix), the backward in ``_Node``
(a runtime.EagerNode; a double backward runs layernorm.backward_ops, as the registered op). torch.compile
traces the registered ops instead.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch

from .layernorm import (_RowBackward, _RowForward, _backward_plan, _forward_plan, _launch_forward, _rows,
                        backward_ops, layer_norm_backward)
from .runtime import Config, EagerNode, cdiv, config_str

class _Node(EagerNode):
    """The autograd node of an eager layer_norm call: y from (x2, w, b); the statistics are saved only."""


class _Call:
    """One layer_norm call signature (shape, strides, dtype, device of x, weight, bias; normalized_shape,
    eps, config; which inputs need a gradient), validated once. Its first call finds the plans; later calls
    allocate the outputs and launch the row kernels with every other argument fixed (BoundKernel.fix). x2
    stands in for an absent weight / bias and an unneeded dx."""

    def __init__(self, x, shape: tuple, weight, bias, eps: float, config: Optional[Config], needs) -> None:
        self.D, self.M = math.prod(shape), math.prod(x.shape[: x.ndim - len(shape)])
        self.rows = len(shape) == 1 and x.ndim == 2 and (shape[0] <= 1 or x.stride(1) == 1)  # x is (M, D) rows
        self.flat = len(shape) == 1  # weight and bias are (D,)
        self.eps, self.config, self.has = float(eps), config, (weight is not None, bias is not None)
        self.needs = needs  # (dx, dw, db) needed; None: no autograd (no statistics saved)
        self.param_dtypes = [t.dtype if t is not None and t.dtype != torch.float32 else None for t in (weight, bias)]
        self.forward_launch, self.backward_launches = None, {}  # the latter by dy's row stride

    def __call__(self, x, weight, bias):
        x2 = x if self.rows else _rows(x, self.M, self.D)
        w, b = (weight if weight is not None else x2), (bias if bias is not None else x2)
        if not self.flat:
            w, b = (w.reshape(self.D) if weight is not None else x2), (b.reshape(self.D) if bias is not None else x2)
        y = self.run(x2, w, b)[0] if self.needs is None else _Node.run(self, x2, w, b)
        return y if self.rows else y.reshape(x.shape)

    def run(self, x2, w, b):
        (M, D), stats = (self.M, self.D), self.needs is not None  # without statistics, y stands in for them
        y = torch.empty_like(x2, memory_format=torch.contiguous_format)
        mean = y.new_empty((M,), dtype=torch.float32) if stats else y
        rstd = y.new_empty((M,), dtype=torch.float32) if stats else y
        if self.forward_launch is None:
            sw, sb, eps = (w.stride(0) if self.has[0] else 0), (b.stride(0) if self.has[1] else 0), self.eps
            plan = _forward_plan(self.config, x2, w, b, y, mean, rstd, sw, sb, eps, *self.has, stats) if M * D else 0
            self.forward_launch = (
                plan.kernel.fix((cdiv(M, plan.rows),), x2, w, b, y, mean, rstd, M, D, x2.stride(0), D, sw, sb, eps)
                if type(plan) is _RowForward else (lambda *tensors: None) if not plan  # empty: nothing to launch
                else functools.partial(_launch_forward, plan, stride_w=sw, stride_b=sb, eps=eps))
        self.forward_launch(x2, w, b, y, mean, rstd)
        return y, mean, rstd

    def forward(self, ctx, x2, w, b):
        y, mean, rstd = self.run(x2, w, b)
        ctx.save_for_backward(x2, w, mean, rstd)  # w: x2 when there is no weight
        return y

    def general_backward(self, ctx, dy):
        """The registered op's backward (layernorm.backward_ops): a double backward."""
        x2, w, mean, rstd = ctx.saved_tensors
        dtypes = [dtype or torch.float32 for dtype in self.param_dtypes]
        return backward_ops(dy, x2, w if self.has[0] else None, mean, rstd, self.needs, self.eps,
                            config_str(self.config), dtypes)

    def backward(self, ctx, dy):
        x2, w, mean, rstd = ctx.saved_tensors
        (M, D), (need_dx, need_dw, need_db) = (self.M, self.D), self.needs
        if D > 1 and dy.stride(1) != 1:
            dy = dy.contiguous()
        dx = torch.empty_like(x2, memory_format=torch.contiguous_format) if need_dx else None
        fixed = self.backward_launches.get(dy.stride(0))
        if fixed is None:
            fixed = self.backward_launches[dy.stride(0)] = self._fix_backward(x2, w, dy, dx, mean, rstd)
        dw = db = None
        if not fixed:  # empty, or long rows: the launcher, kernel arguments computed per call
            dx, dw, db = layer_norm_backward(dy, x2, w if self.has[0] else None, mean, rstd, need_dx, need_dw, need_db,
                                             self.config)
        elif not (need_dw or need_db):
            fixed[0](x2, w, dy, dx, mean, rstd, x2)
        else:  # per-program partial sums, then their sums: dw | db
            parts = x2.new_empty((fixed[2], 2, D), dtype=torch.float32)
            sums = x2.new_empty((2, D), dtype=torch.float32)
            fixed[0](x2, w, dy, dx if need_dx else x2, mean, rstd, parts)
            fixed[1](parts, sums)
            dw, db = sums.unbind(0)
        wd, bd = self.param_dtypes  # dw / db in the parameters' dtypes (None: fp32 already)
        return (dx, (dw.to(wd) if wd else dw) if need_dw else None, (db.to(bd) if bd else db) if need_db else None)

    def _fix_backward(self, x2, w, dy, dx, mean, rstd):
        """(row kernel, partial-sum kernel, programs) with their arguments fixed; False for other plans."""
        (M, D), need_dx, need_sums = (self.M, self.D), self.needs[0], self.needs[1] or self.needs[2]
        sw = w.stride(0) if self.has[0] else 0
        plan = _backward_plan(self.config, x2, w, dy, dx, mean, rstd, sw, self.has[0], need_dx, need_sums) \
            if M * D else None
        if type(plan) is not _RowBackward:
            return False
        P = max(1, min(M, plan.programs))
        parts = x2.new_empty((P, 2, D), dtype=torch.float32) if need_sums else x2
        sums = x2.new_empty((2, D), dtype=torch.float32)
        return (plan.kernel.fix((P,), x2, w, dy, dx if need_dx else x2, mean, rstd, parts, M, D, x2.stride(0),
                                dy.stride(0), D if need_dx else 0, sw),
                plan.sum_rows.fix(plan.sum_grid, parts, sums, P, 2 * D), P)


_CALLS: dict[tuple, _Call] = {}
