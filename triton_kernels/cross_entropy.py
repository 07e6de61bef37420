"""Cross-entropy over logits (M, V), forward and backward in one pass, plus the argmax-accuracy count.

Per row i with target t (weights w_c, default 1; smoothing eps; W = sum_c w_c):
    m = max_c x_c,  s = sum_c exp(x_c - m),  lse = m + log s   (online max / rescaled sum over chunks)
    loss_i = (1 - eps) * w_t * (lse - x_t)  +  (eps / V) * sum_c w_c * (lse - x_c)
           = (1 - eps) * w_t * ((m - x_t) + log s)  +  (eps / V) * (sum_c w_c (m - x_c)  +  W log s)
(the smoothing sum is taken over the shifted logits m - x_c >= 0: no cancellation when the logits share
a large offset, and no overflow of W * lse near the fp32 maximum), which is torch's definition (nll_loss
on log_softmax, plus the smoothing term of torch.nn.functional.cross_entropy). Rows whose target is
ignore_index contribute 0 to the loss, 0 to the denominator and a zero gradient. Reductions:
"none" -> loss_i; "sum" -> sum_i loss_i; "mean" -> sum_i loss_i / sum_{i not ignored} w_{t_i} (NaN when
every row is ignored, as torch).
The gradient of the reduced loss with respect to the logits, with p_c = exp(x_c - lse) and
scale = 1 / denominator for "mean", 1 otherwise:
    dx_c = scale * [ ((1 - eps) w_t + (eps / V) W) p_c  -  (1 - eps) w_t [c == t]  -  (eps / V) w_c ]
It is written DURING the forward (from registers, or for long rows by reading the logits once more from
the same program, usually from L2), so the backward is only a multiplication by the incoming gradient --
done in place, and skipped on the device (no host sync) when that gradient is 1, as it is after
`loss.backward()`. Hence no double backward: a backward in grad mode (create_graph=True) raises a
RuntimeError.
The same sweep counts the rows whose argmax (first maximal index, as torch.argmax) equals the target.

Tiling: a persistent grid of P programs (a few per SM) walks the rows (row = pid, pid + P, ...), with one
of two kernels (cross_entropy_kernels.py), which share the per-row terms (small jit helpers):
* `_ce_fwd_row_kernel`: a row of at most BLOCK_V classes held in registers (BLOCK_V up to 32768:
  16 warps x 32 threads x 64 values): one read, one exp per element, one write -- no re-read.
* `_ce_fwd_chunked_kernel`: longer rows (vocabularies up to 256k and beyond) in BLOCK_V chunks: an
  online sweep for the statistics, then a second sweep, over the chunks in reverse order (the most
  recently read first, while they are still in L2), for the gradient.
Each program keeps its loss / weight / correct sums in registers and writes one partial per program; a
one-program finalize kernel adds the P partials -- no atomics, deterministic. For "mean" with a gradient,
the denominator sum_i w_{t_i} is needed before the first gradient is written: each program computes it
from the targets (cheap while M * P is small) or a one-program prologue kernel writes it to device memory.
The tuner (`_configs`) picks the kernel and its tiling per shape and dtype, a launch plan keeps the choice
per key (`_PLANS`), and ``config=`` chooses them explicitly (`check_config`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch.compiler import is_compiling

from autotune import spaces

from . import double_backward
from .cross_entropy_kernels import LOG2E  # noqa: F401  (public name, kept importable from here)
from .cross_entropy_kernels import (_ce_denominator_kernel, _ce_finalize_kernel, _ce_fwd_chunked_kernel,
                                    _ce_fwd_row_kernel, _ce_scale_grad_kernel)
from .launcher import BoundKernel, bind
from .runtime import is_fake as _is_fake
from .runtime import (INTERPRET, INTERPRETER_STORE_DTYPES, Autotuner, Config, EagerNode, bucket, check_choice,
                      check_tensor, config_from, config_str, first_outside, next_power_of_2, num_sms, register_op,
                      register_tuner, remember_call)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TARGET_DTYPES = (torch.int64, torch.int32)
REDUCTIONS = ("none", "sum", "mean")
MAX_ONE_CHUNK_V = spaces.CE_MAX_ONE_CHUNK_V  # rows up to this many classes (next power of two): one-chunk configs
MAX_REG_ROW_V = spaces.CE_MAX_REG_ROW_V  # rows up to this many classes may be held whole in registers (16 warps)
PF_MAX_BYTES = 1 << 17  # the next row is prefetched into L2 only when a row is at most this large
BLOCK_T = 1024          # targets per step when summing the denominator
MAX_PARTIALS = 4096     # upper bound on the persistent grid (finalize loads all partials in one block)
DENOM_IN_KERNEL_MAX = 1 << 22  # each program sums the M targets itself while M * programs <= this


# ----------------------------------------------------------------------------------------------------
# Configs: the kernel (row or chunked), chunk size, warps, programs per SM (the persistent grid)
# ----------------------------------------------------------------------------------------------------
def _configs(V: int, elem_bytes: int = 4) -> list[Config]:
    """Candidates, best guess first (the first runs when tuning is off and under torch.compile tracing): the
    declared cross_entropy space's tuner list (autotune/spaces.py).

    Rule: a row of at most 32768 classes is held in registers by 16 warps (64 values per thread, one
    program per SM; fewer warps need more registers than leave room for a second program, 32 warps
    spill), the L2 prefetch of the next row first for rows of at most 64 KB; longer rows are chunked,
    register double-buffering first, with one 16-warp program per SM and 8192-wide chunks so that the
    rows in flight stay well inside L2 for the gradient sweep's re-read.
    """
    return spaces.candidates("cross_entropy", M=1, V=V, dtype=elem_bytes)


def _interpret_config(V: int) -> Config:
    """The interpreter's config: the row in one block up to 1024 classes, longer rows in chunks of 1024."""
    return spaces.interpret_config("cross_entropy", M=1, V=V)


class CrossEntropyKey(NamedTuple):
    """What a tuned cross-entropy config depends on (the cache entry's fields)."""
    m: int  # rows, bucketed
    v: int  # classes, bucketed
    dtype: torch.dtype
    has_weight: bool
    smooth: bool  # label smoothing
    compute_grad: bool
    reduction: str
    unit_stride: bool  # classes contiguous


_tuner = register_tuner(Autotuner("cross_entropy", [_ce_fwd_row_kernel, _ce_fwd_chunked_kernel], _configs(1 << 15),
                                  interpret_config=_interpret_config(1 << 15)))
_FLAGS = ("PREFETCH", "REG_DB", "DENOM_IN_KERNEL")


def check_config(config: Optional[Config], V: Optional[int] = None) -> None:
    """A launch config names BLOCK_V (a power of two: rows of at most BLOCK_V classes run the row kernel,
    longer ones the chunked kernel in chunks of BLOCK_V) and PER_SM (programs per SM), and may set the 0/1
    flags PREFETCH (row kernel, GPU, unit class stride: ask L2 for the next row), REG_DB (chunked kernel:
    register double-buffering) and DENOM_IN_KERNEL (the "mean" denominator summed by every program, or by
    a prologue kernel; default: by M x programs). Else a ValueError naming ``config`` (V: the classes)."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise ValueError(f"config must be a triton_kernels.runtime.Config or None, got {type(config).__name__}")
    if not {"BLOCK_V", "PER_SM"} <= set(config.kwargs) <= {"BLOCK_V", "PER_SM", *_FLAGS}:
        raise ValueError(f"config must name BLOCK_V and PER_SM and may name {', '.join(_FLAGS)}; "
                         f"got {sorted(config.kwargs)}")
    bv, per_sm = config.kwargs["BLOCK_V"], config.kwargs["PER_SM"]
    if not isinstance(bv, int) or bv < 1 or bv & (bv - 1) or not isinstance(per_sm, int) or per_sm < 1:
        raise ValueError(f"config's BLOCK_V must be a positive power of two and PER_SM a positive int, got "
                         f"BLOCK_V={bv!r}, PER_SM={per_sm!r}")
    if any(config.kwargs.get(flag, 0) not in (0, 1) for flag in _FLAGS):
        raise ValueError(f"config's {', '.join(_FLAGS)} must be 0 or 1, got {config}")
    if V is not None and config.kwargs.get("PREFETCH", 0) and V > bv:
        raise ValueError(f"config's PREFETCH is for rows held whole (V <= BLOCK_V), got BLOCK_V={bv}, V={V}")


# ----------------------------------------------------------------------------------------------------
# Launchers: per key a plan (the kernels bound to their config, launcher.bind), found once
# ----------------------------------------------------------------------------------------------------
class _Plan(NamedTuple):
    fused: tuple[BoundKernel, BoundKernel]  # the row or chunked kernel, with DENOM_IN_KERNEL False / True
    denominator: BoundKernel  # the "mean" denominator's prologue
    finalize: BoundKernel
    programs: int  # of the persistent grid, at most
    need_denom: bool  # the gradient of a "mean"
    denom_max: float  # every program sums the denominator itself while M x programs <= this


# (M and V rounded up to powers of two, dtype, weighted, smoothed, gradient, reduction, unit class stride,
# device) -> plan: within a key, the kernel, its constexprs and the finalize block hold for every M and V
# (BLOCK_V and the prefetch bound are powers of two).
_PLANS: dict[tuple, _Plan] = {}
_SCALE_PLANS: dict[tuple, tuple[BoundKernel, int]] = {}


def _make_plan(key: tuple, config: Optional[Config], logits, target, weight, grad, loss, ignore_index, eps) -> _Plan:
    """The plan of ``config``, or of the tuner's config for ``key`` (timed on this call's arguments; kept
    unless torch.compile is tracing)."""
    block_m, block_v, dtype, has_weight, smooth, compute_grad, reduction, unit_stride, device = key
    flags = dict(HAS_WEIGHT=has_weight, SMOOTH=smooth, COMPUTE_GRAD=compute_grad, REDUCTION=reduction)
    sms = num_sms(device, default=2)

    def plan_for(cfg: Config) -> _Plan:
        bv = cfg.kwargs["BLOCK_V"]
        if block_v <= bv:  # V <= BLOCK_V: the row in registers
            prefetch = (bool(cfg.kwargs.get("PREFETCH", 0)) and not INTERPRET and unit_stride
                        and block_v * dtype.itemsize <= PF_MAX_BYTES)
            kernel, option = _ce_fwd_row_kernel, {"PREFETCH": prefetch}
        else:
            kernel, option = _ce_fwd_chunked_kernel, {"REG_DB": bool(cfg.kwargs.get("REG_DB", 0))}
        fused = tuple(bind(kernel, **flags, DENOM_IN_KERNEL=in_kernel, BLOCK_V=bv, BLOCK_T=BLOCK_T, **option,
                           num_warps=cfg.num_warps, num_stages=cfg.num_stages) for in_kernel in (False, True))
        programs = max(1, min(sms * cfg.kwargs["PER_SM"], MAX_PARTIALS))
        forced = cfg.kwargs.get("DENOM_IN_KERNEL")
        return _Plan(fused, bind(_ce_denominator_kernel, HAS_WEIGHT=has_weight, BLOCK=BLOCK_T, num_warps=4),
                     bind(_ce_finalize_kernel, REDUCTION=reduction, BLOCK_P=next_power_of_2(min(block_m, programs)),
                          num_warps=4),
                     programs, compute_grad and reduction == "mean",
                     DENOM_IN_KERNEL_MAX if forced is None else (float("inf") if forced else -1))

    if config is not None:
        return plan_for(config)

    def run(cfg: Config) -> None:  # one launch with cfg, timed by the tuner
        _launch_fused(plan_for(cfg), logits, target, weight, grad, loss, ignore_index, eps)

    M, V = logits.shape
    tracing = _is_fake(logits, target)
    tune_key = CrossEntropyKey(m=bucket(M), v=bucket(V), dtype=dtype, has_weight=has_weight, smooth=smooth,
                               compute_grad=compute_grad, reduction=reduction, unit_stride=unit_stride)
    cfg = _tuner.pick(tune_key, run, lambda: _configs(V, dtype.itemsize), tracing=tracing,
                      interpret_config=_interpret_config(V))
    plan = plan_for(cfg)
    if not tracing:
        _PLANS[key] = plan
    return plan


def _launch_fused(plan: _Plan, logits, target, weight, grad, loss, ignore_index, eps) -> tuple[int, torch.Tensor]:
    """The prologue (when the kernel does not sum the "mean" denominator) and the fused kernel; returns
    the number of programs P and the (3 P + 1,) partials."""
    M, V = logits.shape
    P = min(M, plan.programs)
    in_kernel = plan.need_denom and M * P <= plan.denom_max
    part = torch.empty((3 * P + 1,), device=logits.device, dtype=torch.float32)
    w = weight if weight is not None else logits  # dummy pointer when there is no weight
    stride_w = weight.stride(0) if weight is not None else 0
    if plan.need_denom and not in_kernel:
        plan.denominator.launch((1,), target_ptr=target, weight_ptr=w, denom_ptr=part[3 * P:], M=M, V=V,
                                stride_t=target.stride(0), stride_w=stride_w, ignore_index=ignore_index)
    plan.fused[in_kernel].launch(
        (P,), logits_ptr=logits, target_ptr=target, weight_ptr=w, grad_ptr=grad if grad is not None else logits,
        row_loss_ptr=loss, part_ptr=part, M=M, V=V, stride_lm=logits.stride(0), stride_lv=logits.stride(1),
        stride_gm=grad.stride(0) if grad is not None else 0, stride_t=target.stride(0), stride_w=stride_w,
        ignore_index=ignore_index, eps=eps)
    return P, part


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor] = None,
                          ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                          compute_grad: bool = True, config: Optional[Config] = None):
    """Launch the fused kernel on 2-D logits (M, V) and targets (M,).

    Every layout is read in place with its strides (logits, target, weight: expanded, sliced, offset
    views included); a weight that is not fp32 is converted (a copy). The gradient is allocated
    contiguous. config: run this kernel and tiling instead of the tuned one (see ``check_config``).

    Returns (loss, n_correct, grad): loss 0-dim ("mean"/"sum") or (M,) ("none") in the logits dtype;
    n_correct a 0-dim int64 tensor on the device; grad (M, V) in the logits dtype -- the gradient of the
    reduced loss for an incoming gradient of 1 -- or None.
    """
    M, V = logits.shape
    if config is not None:
        check_config(config, V)
    dev = logits.device
    loss = torch.empty((M,) if reduction == "none" else (), device=dev, dtype=logits.dtype)
    correct = torch.empty((), device=dev, dtype=torch.int64)
    grad = torch.empty((M, V), device=dev, dtype=logits.dtype) if compute_grad else None
    if weight is not None and weight.dtype != torch.float32:
        weight = weight.to(torch.float32)
    if M == 0:
        if reduction == "none":
            return loss, correct.zero_(), grad
        return loss.fill_(float("nan") if reduction == "mean" else 0.0), correct.zero_(), grad
    eps = float(label_smoothing)
    plan = _find_plan(config, logits, target, weight, grad, loss, ignore_index, eps, reduction)
    P, part = _launch_fused(plan, logits, target, weight, grad, loss, ignore_index, eps)
    plan.finalize.launch((1,), part_ptr=part, loss_ptr=loss, correct_ptr=correct, P=P)
    return loss, correct, grad


def _find_plan(config, logits, target, weight, grad, loss, ignore_index, eps, reduction) -> _Plan:
    """The kept plan of this call's key (made on its first call), or ``config``'s plan for this call."""
    M, V = logits.shape
    key = (next_power_of_2(M), next_power_of_2(V), logits.dtype, weight is not None, eps > 0.0, grad is not None,
           reduction, logits.stride(1) == 1, logits.device)
    plan = _PLANS.get(key) if config is None else None
    return plan if plan is not None else _make_plan(key, config, logits, target, weight, grad, loss, ignore_index, eps)


def _scale_plan(grad: torch.Tensor) -> tuple[BoundKernel, int]:
    """The in-place scale kernel for gradients of grad's row length, and its most programs."""
    key = (next_power_of_2(grad.shape[1]), grad.device)
    plan = _SCALE_PLANS.get(key)
    if plan is None:
        plan = _SCALE_PLANS[key] = (bind(_ce_scale_grad_kernel, BLOCK_V=min(256 if INTERPRET else 4096, key[0]),
                                         num_warps=8), num_sms(grad.device, default=2) * 8)
    return plan


def scale_grad_(grad: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """grad *= grad_output (0-dim, or (M,) per row) in place; skipped on the device where the factor is 1."""
    M, V = grad.shape
    if M == 0 or V == 0:
        return grad
    plan = _scale_plan(grad)
    plan[0].launch((min(M, plan[1]),), grad_ptr=grad, go_ptr=grad_output.reshape(1) if grad_output.ndim == 0
                   else grad_output, M=M, V=V, stride_gm=grad.stride(0),
                   stride_go=0 if grad_output.ndim == 0 else grad_output.stride(0))
    return grad


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor],
                      ignore_index: int, reduction: str, label_smoothing: float,
                      compute_grad: bool, config: str, check_target: bool) -> list[torch.Tensor]:
    if check_target and not _is_fake(target):  # an opaque op's real targets (the interpreter; see cross_entropy)
        check_targets(target, logits.shape[1], ignore_index)
    loss, correct, grad = cross_entropy_forward(logits, target, weight, ignore_index, reduction, label_smoothing,
                                                compute_grad, config_from(config))
    return [loss, correct, grad if grad is not None else logits.new_empty((0,))]


def _setup_context(ctx, inputs, output):
    ctx.reduction = inputs[4]
    ctx.compute_grad = inputs[6]
    ctx.save_for_backward(output[2])
    ctx.used = False
    # the (M, V) gradient output gets no incoming gradient; autograd would otherwise materialize one as
    # zeros on every backward (a memset as large as the logits)
    ctx.set_materialize_grads(False)


def _double_backward_error() -> RuntimeError:
    return double_backward.unsupported("cross_entropy", "its gradient is written by the forward kernel and only "
                                       "scaled in the backward, so it cannot be differentiated again")


def _backward(ctx, grads):
    dloss = grads[0]
    (grad,) = ctx.saved_tensors
    if not ctx.needs_input_grad[0]:
        return (None,) * 9
    if not ctx.compute_grad:
        raise RuntimeError("cross_entropy ran without computing its gradient (compute_grad=False)")
    if dloss is None:
        return (None,) * 9
    if torch.is_grad_enabled():
        raise _double_backward_error()
    go = dloss if ctx.reduction != "none" else dloss.reshape(-1)
    if _is_fake(grad, dloss):
        # traced (torch.compile): a functional multiply, fused by the compiler
        dx = grad * (go[:, None] if go.ndim == 1 else go).to(grad.dtype)
    else:
        if ctx.used:
            raise RuntimeError("cross_entropy's gradient is computed in the forward and scaled in place: "
                               "its backward can run only once (retain_graph is not supported)")
        ctx.used = True
        dx = scale_grad_(grad, go)  # the kernel reads go in its own dtype: no conversion launch
    return dx, None, None, None, None, None, None, None, None


# torch.compile calls the registered op; eager calls go through _Call (below)
_cross_entropy_call = register_op("tk::cross_entropy", _cross_entropy_op, setup_context=_setup_context,
                                  backward=_backward)


# ----------------------------------------------------------------------------------------------------
# Eager calls: one prepared call per call signature, validated once
# ----------------------------------------------------------------------------------------------------
class _Node(EagerNode):
    """The autograd node of an eager cross_entropy call: (loss, n_correct) from (logits, target, weight)."""


class _Call:
    """One cross_entropy call signature (shape, strides, dtype and device of logits, target and weight;
    ignore_index, reduction, label_smoothing, return_correct, check_target, config; whether the logits
    need a gradient), validated once. Its first call finds the launch plan; a later one allocates the
    outputs and launches with the other kernel arguments fixed (launcher.BoundKernel.fix)."""

    def __init__(self, logits, target, weight, ignore_index, reduction, label_smoothing, return_correct,
                 check_target, config, grad) -> None:
        self.V = logits.shape[0 if logits.ndim == 1 else 1]
        self.M = logits.numel() // self.V if self.V else target.numel()
        self.ndim, self.target_shape = logits.ndim, target.shape
        self.check = check_target or (check_target is None and target.device.type == "cpu")
        self.cast_weight = weight is not None and weight.dtype != torch.float32
        self.ignore_index, self.reduction, self.eps = ignore_index, reduction, float(label_smoothing)
        self.return_correct, self.config, self.grad = return_correct, config, grad
        self.launches = None  # (fixed fused launch, fixed finalize launch, programs, denominator launch or None)
        self.scale = {}  # the incoming gradient's (shape, strides, dtype) -> fixed in-place scale launch

    def __call__(self, logits, target, weight):
        if self.check:
            check_targets(target, self.V, self.ignore_index)
        if self.ndim == 2:
            x2, t2 = logits, target
        elif self.ndim == 1:
            x2, t2 = logits.unsqueeze(0), target.reshape(1)
        else:  # (N, C, d1, ...) -> (N * d1 * ..., C)
            x2, t2 = logits.movedim(1, -1).reshape(-1, self.V), target.reshape(-1)
        w = weight.to(torch.float32) if self.cast_weight else weight  # any layout: read with its stride
        loss, correct = _Node.run(self, x2, t2, w) if self.grad else self.run(x2, t2, w, None)
        if self.reduction == "none":
            loss = loss.reshape(self.target_shape)
        return (loss, correct) if self.return_correct else loss

    def run(self, x2, t2, w, grad):
        M, reduction = self.M, self.reduction
        loss = x2.new_empty((M,) if reduction == "none" else ())
        correct = x2.new_empty((), dtype=torch.int64)
        if M == 0:  # as torch: an empty "none" loss, NaN for "mean", 0 for "sum"
            return (loss if reduction == "none" else loss.fill_(float("nan") if reduction == "mean" else 0.0),
                    correct.zero_())
        if self.launches is None:
            self.launches = self._fix(x2, t2, w, grad, loss, correct)
        fused, finalize, P, denominator = self.launches
        part = x2.new_empty((3 * P + 1,), dtype=torch.float32)
        w = w if w is not None else x2
        if denominator is not None:
            denominator(t2, w, part[3 * P:])
        fused(x2, t2, w, grad if grad is not None else x2, loss, part)
        finalize(part, loss, correct)
        return loss, correct

    def _fix(self, x2, t2, w, grad, loss, correct):
        """The fixed launches of this signature, from its plan (tuned on this first call's tensors)."""
        M, V = x2.shape
        plan = _find_plan(self.config, x2, t2, w, grad, loss, self.ignore_index, self.eps, self.reduction)
        P = min(M, plan.programs)
        in_kernel = plan.need_denom and M * P <= plan.denom_max
        part = x2.new_empty((3 * P + 1,), dtype=torch.float32)
        stride_w = w.stride(0) if w is not None else 0
        w = w if w is not None else x2
        denominator = (plan.denominator.fix((1,), t2, w, part[3 * P:], M, V, t2.stride(0), stride_w, self.ignore_index)
                       if plan.need_denom and not in_kernel else None)
        fused = plan.fused[in_kernel].fix(
            (P,), x2, t2, w, grad if grad is not None else x2, loss, part, M, V, x2.stride(0), x2.stride(1),
            grad.stride(0) if grad is not None else 0, t2.stride(0), stride_w, self.ignore_index, self.eps)
        return fused, plan.finalize.fix((1,), part, loss, correct, P), P, denominator

    def forward(self, ctx, x2, t2, w):
        grad = x2.new_empty((self.M, self.V))
        loss, correct = self.run(x2, t2, w, grad)
        ctx.grad, ctx.used = grad, False  # an internal buffer (never an output): kept on ctx
        # n_correct gets no incoming gradient: none is materialized
        ctx.set_materialize_grads(False)
        return loss, correct

    def general_backward(self, ctx, dloss, dcorrect):
        """A double backward: refused, as by the registered op."""
        if dloss is None:
            return None, None, None
        raise _double_backward_error()

    def backward(self, ctx, dloss, dcorrect):
        if dloss is None:
            return None, None, None
        if ctx.used:
            raise RuntimeError("cross_entropy's gradient is computed in the forward and scaled in place: "
                               "its backward can run only once (retain_graph is not supported)")
        ctx.used = True
        grad = ctx.grad
        if not (self.M and self.V):
            return grad, None, None
        signature = (dloss.shape, dloss.stride(), dloss.dtype)
        scale = self.scale.get(signature)
        if scale is None:  # the kernel reads the incoming gradient in its own dtype: no conversion launch
            go = dloss.reshape(-1) if self.reduction == "none" else dloss
            kernel, programs = _scale_plan(grad)
            scale = self.scale[signature] = kernel.fix((min(self.M, programs),), grad, go, self.M, self.V,
                                                       grad.stride(0), 0 if go.ndim == 0 else go.stride(0))
        scale(grad, dloss if self.reduction != "none" else dloss.reshape(-1))
        return grad, None, None


_CALLS: dict[tuple, _Call] = {}


# ----------------------------------------------------------------------------------------------------
# Public function
# ----------------------------------------------------------------------------------------------------
def _validate(logits, target, weight, ignore_index, reduction, label_smoothing, config):
    check_tensor("logits", logits, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    if logits.ndim == 0:
        raise ValueError("logits must have at least 1 dim (classes), got a 0-dim tensor")
    if not isinstance(target, torch.Tensor):
        raise ValueError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        raise ValueError(f"target must hold integer class indices (int64 or int32), got dtype {target.dtype}; "
                         "class-probability targets are not supported")
    check_tensor("target", target, dtypes=TARGET_DTYPES, device=logits.device)
    expect = () if logits.ndim == 1 else (logits.shape[0], *logits.shape[2:])
    if tuple(target.shape) != tuple(expect):
        raise ValueError(f"target has shape {tuple(target.shape)} but logits of shape {tuple(logits.shape)} "
                         f"need target of shape {tuple(expect)}")
    class_dim = 0 if logits.ndim == 1 else 1
    V = logits.shape[class_dim]
    if V == 0:
        raise ValueError(f"logits of shape {tuple(logits.shape)} have no classes (dim {class_dim} is empty); "
                         "cross_entropy needs at least one")
    if weight is not None:
        check_tensor("weight", weight, ndim=1, dtypes=DTYPES, device=logits.device)
        if weight.shape[0] != V:
            raise ValueError(f"weight has {weight.shape[0]} elements but logits have {V} classes")
    check_choice("reduction", reduction, REDUCTIONS)
    if not isinstance(ignore_index, int):
        raise ValueError(f"ignore_index must be an int, got {ignore_index!r}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    check_config(config, V)


def check_targets(target: torch.Tensor, num_classes: int, ignore_index: int = -100) -> None:
    """Raise ValueError if a target (other than ignore_index) is outside [0, num_classes). Host sync."""
    first = first_outside(target, num_classes, ignore_index)
    if first is not None:
        raise ValueError(f"target holds class index {first} outside [0, {num_classes}) "
                         f"(and not ignore_index={ignore_index})")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                  return_correct: bool = False, check_target: bool | None = None, *,
                  config: Optional[Config] = None):
    """torch.nn.functional.cross_entropy (class-index targets) in one fused pass over the logits.

    logits (N, C) / (C,) / (N, C, d1, ...), target (N,) / () / (N, d1, ...) of int64 or int32.
    return_correct: also return the number of non-ignored rows whose argmax equals the target, as a
    0-dim int64 tensor on the device (no host sync): ``loss, n_correct = cross_entropy(..., return_correct=True)``.
    check_target: verify targets are in range on the host (a device sync); default: only for CPU
    tensors. Unchecked out-of-range targets give a NaN loss and NaN gradient rows.
    config: run this kernel and tiling instead of the tuned one (see ``check_config``).
    """
    key = None
    if not is_compiling():
        try:  # the call signature: what validation, the launch plans and the kernel arguments depend on
            key = (logits.__class__, logits.shape, logits.stride(), logits.dtype, logits.device,
                   torch.is_grad_enabled() and logits.requires_grad, target.__class__, target.shape, target.stride(),
                   target.dtype, target.device, weight is not None and (weight.shape, weight.stride(), weight.dtype,
                                                                         weight.device),
                   ignore_index, reduction, float(label_smoothing), return_correct, check_target, config)
            call = _CALLS.get(key)
        except (AttributeError, TypeError, ValueError):  # not a tensor, not hashable: validated on every call
            key = call = None
        if call is not None:
            return call(logits, target, weight)
    _validate(logits, target, weight, ignore_index, reduction, label_smoothing, config)
    if not is_compiling() and not _is_fake(logits, target, weight):  # eager: kept for this signature's later calls
        call = _Call(logits, target, weight, ignore_index, reduction, label_smoothing, return_correct, check_target,
                     config, torch.is_grad_enabled() and logits.requires_grad)
        return remember_call(_CALLS, key, call)(logits, target, weight)
    # traced by torch.compile: the registered op
    V = logits.shape[0 if logits.ndim == 1 else 1]
    # the targets' range check on the host: in the interpreter the op is opaque and checks its real targets as it
    # runs; on the GPU it is traced into its kernels, so the check runs here (a data-dependent branch)
    check = bool(check_target or (check_target is None and target.device.type == "cpu"))
    if check and not INTERPRET:
        check_targets(target, V, ignore_index)
    if logits.ndim == 1:
        x2, t2 = logits.unsqueeze(0), target.reshape(1)
    elif logits.ndim == 2:
        x2, t2 = logits, target
    else:  # (N, C, d1, ...) -> (N * d1 * ..., C)
        x2, t2 = logits.movedim(1, -1).reshape(-1, V), target.reshape(-1)
    w = weight.to(torch.float32) if weight is not None else None  # any layout: read with its stride
    compute_grad = torch.is_grad_enabled() and logits.requires_grad
    loss, correct, _ = _cross_entropy_call(x2, t2, w, ignore_index, reduction, float(label_smoothing),
                                           compute_grad, config_str(config), check and INTERPRET)
    if reduction == "none":
        loss = loss.reshape(target.shape)
    return (loss, correct) if return_correct else loss
