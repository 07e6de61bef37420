"""The eager fast path of the fused GEMM (triton_kernels/gemm.py's ``linear`` and ``gemm``).

A call whose signature -- every tensor's class, shape, strides, dtype, device and whether it needs a
gradient; the activation, precision and config -- was seen before skips validation, the tuning-key and plan
lookups and the kernel-argument arithmetic: it allocates its outputs and launches through functions that
have every non-tensor kernel argument fixed (launcher.BoundKernel.fix), for whichever plan the general path
chose (the pointer kernel, split-K partials + reduction, or the persistent TMA kernel). Its backward runs
in ``_Node`` (a runtime.EagerNode): the activation-backward / dbias pass, dA = dZ @ B^T and dB, each
launched the same way (or, where gemm_backward.applies, its one launch), with the same plans and the same
formulas as gemm.py's backward, so both paths give the same gradients (dW of nn.Linear's weight written in
the weight's own layout, see gemm.grad_b_transposed). Where both products are wanted and large
(``CHAIN_MIN_FLOPS``, on a GPU with dependent launches), dB runs first and dA is launched as its programmatic
dependent: dA's programs start on the SMs that dB's last tiles leave idle (the kernels' PDL flag).

The first call of a signature takes the general path (which validates, so bad input raises a ValueError
naming the argument before any launch, and tunes) and is remembered here (at most
runtime.MAX_CALL_SIGNATURES). Under autocast the operands arrive cast (runtime.torch_matmul_operands), so
their signature is of the autocast dtype. The general path runs instead while torch.compile traces, for tensor
subclasses (fake tensors included), for empty shapes and for a double backward (create_graph);
a TMA plan met with an operand whose address is not 16-byte aligned launches that call's own plan.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.compiler import is_compiling

from .gemm import (CURVED, _flags, _forced_plan, _launch_plan, act_backward_buffers, act_backward_fixed,
                   backward_ops, find_plan, grad_b_transposed, index_64_needed, plan_launches, relayout)
from . import gemm_backward
from .tma import _ensure_allocator
from .launcher import bind, launch_and_fix
from .runtime import EagerNode, are_plain, dependent_launch, remember_call

# the backward chains dB -> dA (dependent launch) where dA's 2 M N K multiply-adds reach this many FLOPs, the
# GEMMs whose last wave of tiles leaves SMs idle long enough to matter. Measured on an H100, replayed: Linear
# 4096 x 8704 -> 1024, dX + dW 235 -> 225 us (cuBLAS 212); the Char-CNN's fc1, 512 x 8704 -> 1024 (dX 9.1e9
# FLOPs), forward + backward 83.4 -> 81.3 us (eager 81.9). Smaller backward GEMMs were not measured chained
CHAIN_MIN_FLOPS = 2**33


class _FixedGemm:
    """One GEMM of a call signature, C = act(A @ B + bias) (+ residual) with Z stored when given: the plan
    gemm.gemm_forward runs for it (gemm.find_plan's, or the one of a given ``config``) and its launches
    with every argument but the tensors fixed. Made from the signature's first fast call (which it
    launches); called with the tensors of each later one."""

    def __init__(self, a, b, c, bias, residual, z, activation: str, precision: str, config=None,
                 chain: str = "") -> None:
        """``chain``: "first" (the kernel lets the next one launch early) or "second" (a dependent launch of
        the GEMM ahead, which it neither reads nor writes: see _chained) where the plan is one launch."""
        M, K = a.shape
        N = b.shape[1]
        self.shape, self.activation, self.config = (M, N, K), activation, config
        self.precision = precision if a.dtype == torch.float32 else "ieee"  # as gemm.gemm_forward runs it
        self.index_64 = index_64_needed(a, b, bias, residual, None, M, N)
        plan, b_read = self._plan(a, b, c, bias, residual, z)
        # a forced B_RELAYOUT config reads a copy of B made with its plan: here, one per call
        self.tma, self.relayout = plan.programs > 0, plan.relayout or b_read is not b
        self.a_copy = plan.a_copy  # the Gluon kernel reads a row-major copy of A, made per call
        self.device_descriptors = plan.device_descriptors
        steps = plan_launches(plan, a, b_read, c, bias, residual, z, M, N, K)
        # chained only when the GEMM is one launch (no split-K reduction; no copy of B that it would read) of a
        # kernel with the PDL flag (not the Gluon one)
        if chain and len(steps) == 1 and not self.relayout and "PDL" in steps[0][0].constexprs:
            steps = [_chained(*steps[0], dependent=chain == "second")]
        self.launches = [launch_and_fix(kernel, grid, args) for kernel, grid, args in steps]
        self.partials = steps[0][2]["part_ptr"].shape if plan.split_k > 1 else None  # split-K's fp32 buffer

    def _plan(self, a, b, c, bias, residual, z) -> tuple:
        """(plan, B as its kernels read it) for these operands, as gemm.gemm_forward finds them."""
        if self.config is None:
            return find_plan(a, b, c, bias, residual, z, self.activation, self.precision, self.index_64), b
        flags = _flags(bias is not None, residual is not None, z is not None, self.activation, self.precision,
                       self.index_64)
        return _forced_plan(self.config, flags, a, b)

    def __call__(self, a, b, c, bias, residual, z) -> None:
        bias_ptr = bias if bias is not None else c  # absent tensors point at C, unread (as plan_launches)
        res_ptr = residual if residual is not None else c
        z_ptr = z if z is not None else c
        if self.partials is not None:
            part = c.new_empty(self.partials, dtype=torch.float32)
            self.launches[0](a, b, part)
            self.launches[1](part, c, bias_ptr, res_ptr, z_ptr)
            return
        if self.tma:
            if (a.data_ptr() | b.data_ptr()) & 15:  # TMA reads 16-byte aligned bases only: this call's own plan
                plan, b_read = self._plan(a, b, c, bias, residual, z)
                _launch_plan(plan, a, b_read, c, bias, residual, z, *self.shape)
                return
            if self.relayout:
                b = relayout(b)
            if self.a_copy:
                a = relayout(a)
            if self.device_descriptors:
                _ensure_allocator()  # set in this thread too (autograd's backward runs in a thread of its own)
        self.launches[0](a, b, c, bias_ptr, res_ptr, z_ptr)


def _chained(kernel, grid, args: dict, dependent: bool) -> tuple:
    """One GEMM launch (plan_launches') with the kernel's PDL flag set: it lets the next kernel launch once all
    its programs have started, and with ``dependent`` it is launched as a programmatic dependent of the kernel
    ahead and ends only after that kernel has."""
    options = dict(kernel.options, launch_pdl=True) if dependent else kernel.options
    return bind(kernel.kernel, **dict(kernel.constexprs, PDL=True), **options), grid, args


class _Node(EagerNode):
    """The autograd node of an eager GEMM / linear call of a known signature."""


class _Call:
    """One call signature of ``gemm(a, b, ...)`` or ``linear(x, weight, ...)``, validated once by the general
    path. ``weight``: the second operand is nn.Linear's weight, B = weight.t(); ``out_shape``: linear's
    output shape when x is not already (M, K) rows. The GEMMs are fixed on first use (the forward on the
    signature's first fast call, the backward per dC layout)."""

    def __init__(self, a, b, bias, residual, activation: str, precision: str, save_preact: bool, config,
                 needs: tuple, weight: bool, out_shape: Optional[tuple]) -> None:
        (self.M, self.K), self.N = a.shape, b.shape[1]
        self.activation, self.precision, self.save_preact = activation, precision, save_preact
        self.config = config  # the forward GEMM's (None: tuned); the backward's GEMMs are tuned
        self.needs = needs  # (dA, dB, dbias, dresidual) needed; None: no autograd
        self.weight, self.out_shape = weight, out_shape
        self.bias_dtype = bias.dtype if bias is not None else None
        self.b_transposed = grad_b_transposed(b)  # dB written as (dZ^T A)^T, in B's layout
        # the one-launch backward, by gemm.backward_ops' rule
        self.fused = needs is not None and gemm_backward.applies(self.M, self.N, self.K, activation, needs)
        self.forward_gemm: Optional[_FixedGemm] = None
        # dB first, then dA as its dependent launch (see the module docstring)
        self.chain = (needs is not None and not self.fused and bool(needs[0] and needs[1])
                      and 2 * self.M * self.N * self.K >= CHAIN_MIN_FLOPS and dependent_launch(a.device))
        # (dC's strides, dtype) -> [act pass, dA GEMM, dB GEMM], or the fused backward's fixed launch
        self.backward_launches: dict[tuple, object] = {}

    def __call__(self, a, b, bias, residual) -> torch.Tensor:
        if self.out_shape is not None:  # linear's (..., K) input as (M, K) rows
            a = a.reshape(self.M, self.K)
            residual = residual.reshape(self.M, self.N) if residual is not None else None
        c = _Node.run(self, a, b, bias, residual) if self.needs is not None else self.run(a, b, bias, residual)[0]
        return c if self.out_shape is None else c.reshape(self.out_shape)

    def run(self, a, b, bias, residual) -> tuple:
        """(C, Z or None) from A, the second operand, bias and residual (M, N)."""
        c = a.new_empty((self.M, self.N))
        z = a.new_empty((self.M, self.N)) if self.save_preact else None
        operand = b.t() if self.weight else b
        if self.forward_gemm is None:
            self.forward_gemm = _FixedGemm(a, operand, c, bias, residual, z, self.activation, self.precision,
                                           self.config)
        else:
            self.forward_gemm(a, operand, c, bias, residual, z)
        return c, z

    def forward(self, ctx, a, b, bias, residual) -> torch.Tensor:
        c, z = self.run(a, b, bias, residual)
        # what the activation's backward reads: Z, or relu's sign off the output (no residual), or nothing
        saved = None if self.activation == "none" else z if self.save_preact else c
        ctx.save_for_backward(a, b, saved, bias if self.activation in CURVED else None)
        return c

    def general_backward(self, ctx, dc) -> tuple:
        """The general path's backward (gemm.backward_ops): a double backward."""
        a, b, saved, bias = ctx.saved_tensors
        operand = b.t() if self.weight else b
        da, db, dbias, dres = backward_ops(dc, a, operand, saved, self.needs, self.activation, self.precision,
                                           self.bias_dtype, bias)
        return da, (db.t() if self.weight and db is not None else db), dbias, dres

    def backward(self, ctx, dc) -> tuple:
        a, b, saved, _ = ctx.saved_tensors
        operand = b.t() if self.weight else b
        need_a, need_b, need_bias, need_res = self.needs
        if self.fused:
            return self._fused_backward(dc, a, operand, saved)
        fixed = self.backward_launches.get((dc.stride(), dc.dtype))
        if fixed is None:
            fixed = self.backward_launches[(dc.stride(), dc.dtype)] = [None, None, None]
        dz, dbias = dc, None
        if self.activation != "none" or need_bias:  # dZ = dC * act'(Z) and / or dbias = colsum(dZ)
            dz_, dbias, part, counters = act_backward_buffers(dc, self.activation, True, need_bias, self.bias_dtype)
            fixed[0] = act_backward_fixed(fixed[0], dc, saved, dz_, dbias, part, counters, self.activation)
            dz = dz_ if dz_ is not None else dc
        if self.chain:  # dB, then dA launched as its dependent
            db = self._grad_b(fixed, dz, a, "first")
            da = self._grad_a(fixed, dz, operand, "second")
        else:
            da = self._grad_a(fixed, dz, operand, "") if need_a else None
            db = self._grad_b(fixed, dz, a, "") if need_b else None
        return da, db, dbias, dc if need_res else None

    def _grad_a(self, fixed: list, dz, operand, chain: str):
        """dA = dZ @ B^T."""
        da = dz.new_empty((self.M, self.K))
        fixed[1] = self._gemm(fixed[1], dz, operand.t(), da, chain)
        return da

    def _grad_b(self, fixed: list, dz, a, chain: str):
        """dB, returned in the layout autograd expects (the weight's for linear)."""
        if self.b_transposed:  # dB^T = dZ^T @ A, (N, K): for linear the weight's gradient itself
            db = dz.new_empty((self.N, self.K))
            fixed[2] = self._gemm(fixed[2], dz.t(), a, db, chain)
            return db if self.weight else db.t()
        db = a.new_empty((self.K, self.N))  # dB = A^T @ dZ, (K, N)
        fixed[2] = self._gemm(fixed[2], a.t(), dz, db, chain)
        return db.t() if self.weight else db

    def _fused_backward(self, dc, a, b, saved) -> tuple:
        """The one-launch backward (gemm_backward.py) on B as the GEMM read it."""
        need_a, _, need_bias, need_res = self.needs
        da, db, dbias = gemm_backward.buffers(dc, a, b, need_a, need_bias, self.bias_dtype, self.b_transposed)
        key = (dc.stride(), dc.dtype)
        fixed = self.backward_launches.get(key)
        if fixed is None:
            self.backward_launches[key] = launch_and_fix(*gemm_backward.launch_args(
                dc, saved, a, b, da, db, dbias, self.activation, self.precision))
        else:
            fixed(dc, saved if saved is not None else dc, a, b, da if da is not None else dc, db,
                  dbias if dbias is not None else dc)
        return da, (db.t() if self.weight else db), dbias, dc if need_res else None

    def _gemm(self, fixed: Optional[_FixedGemm], a, b, c, chain: str = "") -> _FixedGemm:
        """C = A @ B through ``fixed`` (made and launched here the first time, ``chain`` as _FixedGemm's);
        returns it."""
        if fixed is None:
            return _FixedGemm(a, b, c, None, None, None, "none", self.precision, chain=chain)
        fixed(a, b, c, None, None, None)
        return fixed


_CALLS: dict[tuple, _Call] = {}


def _signature(t, grad: bool):
    return None if t is None else (t.__class__, t.shape, t.stride(), t.dtype, t.device, grad and t.requires_grad)


def lookup(op: str, a, b, bias, residual, activation, precision, config) -> tuple:
    """(signature, its prepared call or None) of a ``gemm`` / ``linear`` (``op``) call, its operands as
    runtime.torch_matmul_operands gives them; the signature is None where the call must take the general path
    and not be remembered: torch.compile tracing, an argument that is not a tensor or not hashable."""
    if is_compiling():
        return None, None
    try:
        grad = torch.is_grad_enabled()
        key = (op, _signature(a, grad), _signature(b, grad), _signature(bias, grad), _signature(residual, grad),
               activation, precision, config)
        return key, _CALLS.get(key)
    except (AttributeError, TypeError):  # not a tensor
        return None, None


def remember(key, a, b, bias, residual, activation: str, precision: str, save_preact: bool, config, weight: bool,
             out_shape: Optional[tuple] = None) -> None:
    """After a general-path call of signature ``key`` (A (M, K), B (K, N), bias, residual (M, N) as the GEMM
    took them; ``weight``: B is nn.Linear's weight.t()): keep its prepared call, unless the key is None,
    a tensor is of another class than torch.Tensor / nn.Parameter (fake tensors included) or a size is 0."""
    if key is None or not (a.shape[0] and a.shape[1] and b.shape[1]):
        return
    if not are_plain(a, b, bias, residual):
        return
    grad = torch.is_grad_enabled()
    needs = tuple(bool(grad and t is not None and t.requires_grad) for t in (a, b, bias, residual))
    remember_call(_CALLS, key, _Call(a, b, bias, residual, activation, precision, save_preact, config,
                                     needs if any(needs) else None, weight, out_shape))
