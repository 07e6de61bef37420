"""GEMM with a fused epilogue:  C = act(A @ B + bias) (+ residual), forward and backward.

Shapes: A (M, K), B (K, N), bias (N,), residual (M, N), C (M, N); any strides, stride 0 (expanded) and
unaligned base addresses included: every operand is indexed with its strides and read in place, never
copied. Inputs fp32 / fp16 / bf16, accumulated in fp32; fp32 runs in "ieee" (fp32 FMA, or on Hopper where the tuner
finds it faster exact products summed in fp64 on the fp64 tensor cores, F64 configs: more accurate), "tf32" (tensor
cores) or "tf32x3" (three tf32 products, about fp32's accuracy on the tensor cores) precision, by default the one
torch's own matmul would use (runtime.torch_matmul_precision). act in {"none", "relu", "gelu", "gelu_tanh"}: "gelu"
is the exact erf GELU (nn.GELU()), "gelu_tanh" the tanh approximation (nn.GELU(approximate="tanh")); all propagate
NaN as torch does (relu(NaN) = NaN). In Triton's CPU interpreter A and B must be fp32 or fp16 (no bf16 dot).

Backward, with Z = A @ B + bias the pre-activation and dZ = dC * act'(Z):
    dA = dZ @ B^T      (the same GEMM kernel, B^T a strided view)
    dB = A^T @ dZ      (the same GEMM kernel; for a K-major B, e.g. nn.Linear's weight.t(), computed as
                        (dZ^T @ A)^T, so dW is written in the weight's own layout)
    dbias = sum_rows(dZ), dresidual = dC
dZ and the column sums come from one elementwise pass (`_act_bwd_kernel`; its last program per column block
adds the tiles' partial sums in a fixed order). A short GEMM with relu or no activation runs all of it in one
launch instead (gemm_backward.py; ``backward_ops``' ``fused``).

Kernels, chosen per shape by the tuner: the pointer kernel (one program per C tile), the persistent TMA
kernel on Hopper (programs loop over the tiles), split-K for outputs of few tiles with a long K
(SPLIT_K programs per tile each reduce a slice of K into fp32 partials; a second kernel adds them in a
fixed order and applies the epilogue), and for tf32 with A row-major and B N-major on Hopper a
warp-specialised Gluon kernel that reads B where it lies (gemm_gluon.py), not a copy of B.

The kernels are in ``gemm_kernels.py`` and ``gemm_gluon.py``; this file holds the tuner (candidates from
autotune/spaces.py), validation, launch plans, launchers, torch ops and the public functions. An eager call of
``linear`` / ``gemm`` whose signature was seen before runs its prepared call (``gemm_eager.py``) instead: no
validation, no plan lookup, launches with their arguments fixed; torch.compile traces the registered ops.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton

from autotune import spaces

from . import double_backward, gemm_backward
from .gemm_kernels import (_act_bwd_columns_kernel, _act_bwd_kernel, _epilogue, _epilogue_tile, _gemm_kernel,
                           _gemm_splitk_partial_kernel, _gemm_splitk_reduce_kernel, _gemm_tma_kernel, _mma,
                           _transpose_kernel)
from .gemm_gluon import AVAILABLE as GLUON_AVAILABLE, _gemm_tf32_nmajor_kernel
from .launcher import BoundKernel, bind, launch_and_fix
from .tma import _INTERPRETER_SMS, _ensure_allocator, _tma_device, _tma_eligible, tma_descriptor, tma_layout
from .runtime import (
    cdiv,
    sm_count,
    INTERPRET,
    register_op,
    Autotuner,
    Config,
    bucket,
    config_from,
    config_str,
    check_bias,
    check_choice,
    check_tensor,
    is_fake,
    register_tuner,
    torch_matmul_operands,
)
from .stream_buffers import stream_buffers

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh")
CURVED = ("gelu", "gelu_tanh")  # activations with a second derivative: a double backward recomputes Z
PRECISIONS = ("ieee", "tf32", "tf32x3")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_X_DIMS = tuple(range(1, 9))  # linear's x: (..., in_features) with 1 to 8 dims


# ----------------------------------------------------------------------------------------------------
# Autotuning space
# ----------------------------------------------------------------------------------------------------
# the declared GEMM space's lists (autotune/spaces.py): the pointer kernel's tiles, the persistent TMA
# kernel's (Hopper+, 16-byte aligned rows; TMA=1) and the same TMA kernel's on a copy of B in the other
# layout (see _launch_plan; TMA=1, B_RELAYOUT=1); the tuner's cache file is keyed by all of them
INTERPRET_CONFIG = spaces.GEMM_INTERPRET_CONFIG

class GemmKey(NamedTuple):
    """What a tuned GEMM config depends on (the cache entry's fields)."""
    m: int  # buckets: the next power of two
    n: int
    k: int
    dtype: torch.dtype
    precision: str  # "ieee" | "tf32" | "tf32x3" (fp32 inputs; 16-bit inputs are always "ieee")
    activation: str
    has_bias: bool
    has_residual: bool
    a_unit_stride: bool  # A row-major (K contiguous)
    b_unit_stride: bool  # B row-major (N contiguous); nn.Linear's weight.t() is not
    tma: bool  # the persistent TMA kernel can run (Hopper, aligned operands)
    save_preact: bool = False  # the epilogue also stores Z (a training forward with GELU): a second
    #                            store of the tile, so tuned apart from the inference key


_tuner = register_tuner(Autotuner("gemm", [_gemm_kernel, _gemm_tma_kernel, _gemm_splitk_partial_kernel,
                                           _gemm_splitk_reduce_kernel, _epilogue_tile, _epilogue, _mma],
                                  spaces.GEMM_TUNER_CONFIGS, interpret_config=INTERPRET_CONFIG))


def _prune(M: int, N: int, K: int, elem: int, tma: bool = False, relayout: bool = False,
           nmajor: bool = False, nmajor_copy_a: bool = False, activation: str | None = None,
           f64: bool = False) -> list[Config]:
    """The declared GEMM space's candidates for this shape, best guess first: the lists above (TMA ones
    where TMA can read the operands, re-laid-out ones where the copy of B stays TMA-aligned, the Gluon kernel's
    where it can run, on A or on a row-major copy of A: see nmajor_eligible; the fp64-accumulating ones where
    f64_eligible), minus what overflows shared memory (the epilogue's included, which depends on the activation),
    tiles far larger than the problem and tiny tiles on a large problem."""
    return spaces.candidates("gemm", M=M, N=N, K=K, dtype=elem, tma=tma, relayout=relayout, nmajor=nmajor,
                             nmajor_copy_a=nmajor_copy_a, activation=activation, f64=f64)


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
# the interpreter has no bfloat16 tl.dot (it returns values around 1e10): the operands A and B must be
# fp32 / fp16 there; bias and residual are only loaded and converted, which it does right in any dtype
INTERPRETER_DTYPES = (torch.float32, torch.float16)


def _validate(a, b, bias, residual, activation, precision, names=("a", "b"), a_checked=False, config=None):
    """Raise a ValueError naming the argument (``names``: what the caller calls A and B; ``a_checked``:
    the caller has checked A with check_tensor already)."""
    name_a, name_b = names
    if not a_checked:
        check_tensor(name_a, a, ndim=2, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_DTYPES)
    check_tensor(name_b, b, ndim=2, dtypes=DTYPES, device=a.device, interpreter_dtypes=INTERPRETER_DTYPES)
    if b.dtype != a.dtype:
        raise ValueError(f"{name_b} has dtype {b.dtype} but {name_a} has {a.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{name_a} is {tuple(a.shape)} and {name_b} is {tuple(b.shape)}: "
                         f"{name_a}.shape[1] must equal {name_b}.shape[0]")
    M, N = a.shape[0], b.shape[1]
    if bias is not None:
        check_bias(bias, N, f"N={N}", DTYPES, a.device)
    if residual is not None:
        check_tensor("residual", residual, ndim=2, dtypes=DTYPES, device=a.device)
        if residual.shape != (M, N):
            raise ValueError(f"residual has shape {tuple(residual.shape)}, expected {(M, N)}")
    check_choice("activation", activation, ACTIVATIONS)
    check_choice("precision", precision, PRECISIONS)
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"config must be a runtime.Config or None, got {type(config).__name__}")


def nmajor_eligible(a, b, prec: str, index_64: bool, copy_a: bool = False, hopper: bool | None = None) -> bool:
    """Whether gemm_gluon's kernel can run this GEMM: tf32 on fp32 operands, A row-major and B N-major (both
    TMA-readable), 32-bit index math, on Hopper itself (its wgmma; not the interpreter). ``copy_a``: it reads a
    row-major copy of A (relayout), whose rows must keep TMA's 16-byte alignment. ``hopper``: whether the device
    is one (default: asked of a's; the autotune sweep plans on meta tensors). Never where Triton lacks its Gluon API
    (gemm_gluon.AVAILABLE)."""
    if not GLUON_AVAILABLE or prec != "tf32" or a.dtype != torch.float32 or index_64 or b.stride(1) != 1:
        return False
    if hopper is None:
        hopper = _tma_device(a) and torch.cuda.get_device_capability(a.device)[0] == 9
    if not hopper or tma_layout(b) != (False, b.stride(0)):
        return False
    if copy_a:
        return (a.shape[1] * a.element_size()) % 16 == 0
    return a.stride(1) == 1 and tma_layout(a) == (False, a.stride(0))


def f64_eligible(a, prec: str, hopper: bool | None = None) -> bool:
    """Whether the tuner offers the fp64-accumulating kernel (F64=1 configs; gemm_kernels._mma): fp32 "ieee" on Hopper
    (``hopper``: default asked of a's device; sweeps plan on meta tensors). A given config may ask for it anywhere."""
    if hopper is None:
        hopper = not INTERPRET and a.is_cuda and torch.cuda.get_device_capability(a.device)[0] == 9
    return prec == "ieee" and a.dtype == torch.float32 and hopper


def relayout_eligible(b, prec: str) -> bool:
    """Whether a re-laid-out copy of B (K, N) (a TMA-readable GEMM's candidates on it) keeps TMA's 16-byte row
    alignment: tf32 with an N-major B (the copy K-major), 16-bit with a K-major B (the copy N-major)."""
    (K, N), es = b.shape, b.element_size()
    return ((prec in ("tf32", "tf32x3") and b.stride(1) == 1 and (K * es) % 16 == 0)
            or (es == 2 and b.stride(0) == 1 and (N * es) % 16 == 0))


def nmajor_flags(a, b, prec: str, index_64: bool, hopper: bool | None = None) -> tuple[bool, bool]:
    """(nmajor, nmajor_copy_a) of a TMA-readable GEMM: whether the Gluon tf32 kernel runs on A, and on a row-major
    copy of an A that is not row-major (nmajor_eligible; ``hopper`` as there)."""
    return (nmajor_eligible(a, b, prec, index_64, hopper=hopper),
            a.stride(1) != 1 and nmajor_eligible(a, b, prec, index_64, copy_a=True, hopper=hopper))


def _needs_int64(*ts) -> bool:
    """True when some element offset (sum of index * stride) can reach 2**31."""
    for t in ts:
        if t is not None:
            shape, stride = t.shape, t.stride()
            if len(shape) == 2:  # the operands: unrolled (this runs on every call)
                m, n = shape
                if m and n and (m - 1) * abs(stride[0]) + (n - 1) * abs(stride[1]) >= 2**31 - 1:
                    return True
            elif t.numel() and sum((n - 1) * abs(st) for n, st in zip(shape, stride)) >= 2**31 - 1:
                return True
    return False


# ----------------------------------------------------------------------------------------------------
# Launch plans: per key (power-of-two exponents of M, N, K, dtype, precision, epilogue, layouts, TMA,
# index width, device) the kernel bound to its tuned config once (launcher.bind, the tuner asked once);
# a steady-state call is a dict lookup and a direct launch. A ``config`` argument makes a plan for that
# call only. Plans found while torch.compile traces (fake tensors: nothing can be timed) are not kept.
# ----------------------------------------------------------------------------------------------------
class _Plan(NamedTuple):
    """A GEMM kernel bound to its config, and what a call derives from the config."""

    kernel: BoundKernel
    block_m: int
    block_n: int
    programs: int   # the TMA kernel: at most this many persistent programs (the SM count); 0: pointer kernel
    relayout: bool  # the TMA kernel reads a copy of B in the other layout (B_RELAYOUT)
    a_t: bool       # the TMA kernel: A stored K-major (A_T)
    b_t: bool       # the TMA kernel: B (or its copy) stored K-major (B_T)
    split_k: int = 1  # split-K: `kernel` writes SPLIT_K fp32 partials of C, `reduce` adds them (epilogue)
    block_k: int = 0
    reduce: Optional[BoundKernel] = None
    a_copy: bool = False  # the Gluon kernel reads a row-major copy of A (A_RELAYOUT)

    @property
    def device_descriptors(self) -> bool:
        """The kernel builds its TMA descriptors on the device (the Gluon one), in scratch memory from the allocator
        Triton calls at launch (tma._ensure_allocator)."""
        return self.kernel.kernel is _gemm_tf32_nmajor_kernel


_PLANS: dict[tuple, _Plan] = {}
_REDUCE_BLOCK = (32, 32) if INTERPRET else (32, 128)  # the split-K reduction's tile (a memory-bound pass)


def _bind(cfg: Config, flags: dict, a_t: bool, b_t: bool, relayout: bool, sms: int) -> _Plan:
    """The plan of ``cfg`` (TMA=1: the persistent TMA kernel, A / B layouts a_t / b_t) with the epilogue
    ``flags`` (the kernels' other constexprs)."""
    flags = {**flags, "PRECISION": "fp64"} if cfg.kwargs.get("F64", 0) else flags  # fp32 "ieee", sums in fp64
    tiles = {k: v for k, v in cfg.kwargs.items() if k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}  # not the flags
    options = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    split = cfg.kwargs.get("SPLIT_K", 1)
    if split > 1:
        partial = bind(_gemm_splitk_partial_kernel, PRECISION=flags["PRECISION"], INDEX_64=flags["INDEX_64"],
                       **tiles, **options)
        epilogue = {k: v for k, v in flags.items() if k != "PRECISION"}
        reduce = bind(_gemm_splitk_reduce_kernel, **epilogue, BLOCK_M=_REDUCE_BLOCK[0], BLOCK_N=_REDUCE_BLOCK[1],
                      num_warps=4)
        return _Plan(partial, tiles["BLOCK_M"], tiles["BLOCK_N"], 0, False, False, False, split, tiles["BLOCK_K"],
                     reduce)
    if cfg.kwargs.get("NMAJOR", 0):  # the Gluon kernel: 4 warps launched (its first consumer warpgroup)
        kernel = bind(_gemm_tf32_nmajor_kernel, HAS_BIAS=flags["HAS_BIAS"], HAS_RES=flags["HAS_RES"],
                      SAVE_Z=flags["SAVE_Z"], ACT=flags["ACT"], **tiles, STAGES=cfg.num_stages, num_warps=4)
        return _Plan(kernel, tiles["BLOCK_M"], tiles["BLOCK_N"], sms, False, False, False,
                     a_copy=bool(cfg.kwargs.get("A_RELAYOUT", 0)))
    # PDL (gemm_eager's chained backward sets it) passed explicitly: torch.compile's launcher for a traced kernel
    # misses a defaulted constexpr
    if cfg.kwargs.get("TMA", 0):
        kernel = bind(_gemm_tma_kernel, A_T=a_t, B_T=b_t, **flags, **tiles, PDL=False, **options)
        return _Plan(kernel, tiles["BLOCK_M"], tiles["BLOCK_N"], sms, relayout, a_t, b_t)
    return _Plan(bind(_gemm_kernel, **flags, **tiles, PDL=False, **options), tiles["BLOCK_M"], tiles["BLOCK_N"], 0,
                 False, False, False)


_TRANSPOSE_BLOCK = 64


def relayout(b: torch.Tensor) -> torch.Tensor:
    """The same (K, N) matrix stored in the other layout: N-major (row-major) becomes K-major (a
    transposed view of an (N, K) row-major copy) and anything else becomes row-major; one launch of
    `_transpose_kernel`."""
    src = b if b.stride(1) == 1 else b.t()
    rows, cols = src.shape
    out = torch.empty((cols, rows), device=b.device, dtype=b.dtype)
    if out.numel():
        kernel = bind(_transpose_kernel, BLOCK=_TRANSPOSE_BLOCK, num_warps=4)
        kernel.launch((cdiv(rows, _TRANSPOSE_BLOCK), cdiv(cols, _TRANSPOSE_BLOCK)), x_ptr=src, y_ptr=out, R=rows,
                      C=cols, stride_xr=src.stride(0), stride_xc=src.stride(1), stride_y=out.stride(0))
    return out.t() if b.stride(1) == 1 else out


def plan_launches(plan: _Plan, a, b, c, bias, residual, z, M: int, N: int, K: int) -> list[tuple]:
    """The launches of one call of a plan, in order: (bound kernel, grid, runtime arguments by name). C (and
    Z) from A, B, bias, residual; bias and residual are read with their strides (stride 0 = expanded), never
    copied; absent ones (and Z) point at C, unread. Split-K allocates its fp32 partials here; a TMA plan
    with ``relayout`` reads a copy of B made here (relayout)."""
    tiles = ((M + plan.block_m - 1) // plan.block_m) * ((N + plan.block_n - 1) // plan.block_n)
    stride_cm, stride_cn = c.stride()
    stride_rm, stride_rn = residual.stride() if residual is not None else (0, 0)
    stride_zm, stride_zn = z.stride() if z is not None else (0, 0)
    epilogue = dict(c_ptr=c, bias_ptr=bias if bias is not None else c, res_ptr=residual if residual is not None else c,
                    z_ptr=z if z is not None else c)
    strides = dict(stride_cm=stride_cm, stride_cn=stride_cn, stride_bias=bias.stride(0) if bias is not None else 0,
                   stride_rm=stride_rm, stride_rn=stride_rn, stride_zm=stride_zm, stride_zn=stride_zn)
    if plan.split_k > 1:
        # K in slices of whole BLOCK_K steps; a shape shorter than its tuning bucket may need fewer slices
        k_per_split = cdiv(cdiv(K, plan.block_k), plan.split_k) * plan.block_k
        splits = cdiv(K, k_per_split)
        part = torch.empty((splits, M, N), device=c.device, dtype=torch.float32)
        stride_am, stride_ak = a.stride()
        stride_bk, stride_bn = b.stride()
        reduce_tiles = cdiv(M, _REDUCE_BLOCK[0]) * cdiv(N, _REDUCE_BLOCK[1])
        return [(plan.kernel, (tiles, splits),
                 dict(a_ptr=a, b_ptr=b, part_ptr=part, M=M, N=N, K=K, K_PER_SPLIT=k_per_split, stride_am=stride_am,
                      stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn)),
                (plan.reduce, (reduce_tiles,), dict(part_ptr=part, **epilogue, M=M, N=N, SPLIT_K=splits, **strides))]
    if not plan.programs:
        stride_am, stride_ak = a.stride()
        stride_bk, stride_bn = b.stride()
        return [(plan.kernel, (tiles,), dict(a_ptr=a, b_ptr=b, **epilogue, M=M, N=N, K=K, stride_am=stride_am,
                                             stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn, **strides))]
    if plan.a_copy:  # the Gluon kernel on a row-major copy of A: tf32 with A M-major and B N-major (dW of a Linear)
        a = relayout(a)
    if plan.relayout:
        # Copy B once into the other layout (N-major <-> K-major). tf32 wgmma reads B K-major only; for
        # 16-bit B the measured K-major (nn.Linear weight) case ran at half the rate of the N-major one.
        # The copy's time is inside the tuner's measurement, so this candidate wins only where it pays
        # for itself.
        b = relayout(b)
    progs = min(tiles, plan.programs)
    if plan.kernel.kernel is _gemm_tma_kernel:  # host-side descriptors: A / B as their layouts store them
        bk = plan.kernel.constexprs["BLOCK_K"]
        return [(plan.kernel, (progs,), dict(a_desc=tma_descriptor(a, plan.a_t, [plan.block_m, bk]),
                                             b_desc=tma_descriptor(b, plan.b_t, [bk, plan.block_n]), **epilogue,
                                             M=M, N=N, K=K, NUM_PROGS=progs, **strides))]
    if plan.device_descriptors and not INTERPRET:
        _ensure_allocator()
    return [(plan.kernel, (progs,), dict(a_ptr=a, b_ptr=b, **epilogue, M=M, N=N, K=K, NUM_PROGS=progs,
                                         stride_a=a.stride(0), stride_b=b.stride(0), **strides))]


def _launch_plan(plan: _Plan, a, b, c, bias, residual, z, M: int, N: int, K: int) -> None:
    """One call of a plan (see plan_launches)."""
    for kernel, grid, args in plan_launches(plan, a, b, c, bias, residual, z, M, N, K):
        kernel.launch(grid, **args)


def _make_plan(key: tuple, flags: dict, a, b, c, bias, residual, z, M: int, N: int, K: int) -> _Plan:
    """The tuner's config for this call's tuning key (unchanged: the persistent cache stays valid), bound.
    The arguments are this call's (the tuner times its candidates on them)."""
    prec, activation, has_bias, has_res, a_unit, b_unit, tma, relayout, save_z, index_64 = key[4:14]
    sms = sm_count(a, default=_INTERPRETER_SMS)
    nmajor, nmajor_copy = nmajor_flags(a, b, prec, index_64) if tma else (False, False)
    f64 = f64_eligible(a, prec)

    def plan_for(cfg: Config) -> _Plan:
        # a B_RELAYOUT config tuned on a shape whose copy of B stays TMA-aligned, met on one of the
        # same tuning key whose copy would not be, runs the TMA kernel on B as it is; likewise an NMAJOR one
        # met where the Gluon kernel cannot run (64-bit indices, a copy of A that TMA could not read)
        if cfg.kwargs.get("NMAJOR", 0) and not (nmajor_copy if cfg.kwargs.get("A_RELAYOUT", 0) else nmajor):
            cfg = Config({k: v for k, v in cfg.kwargs.items() if k not in ("NMAJOR", "A_RELAYOUT")}, cfg.num_warps,
                         cfg.num_stages)
        copy = relayout and bool(cfg.kwargs.get("B_RELAYOUT", 0))
        return _bind(cfg, flags, not a_unit, b_unit if copy else not b_unit, copy, sms)

    def run(cfg: Config) -> None:  # one launch with cfg, timed by the tuner
        _launch_plan(plan_for(cfg), a, b, c, bias, residual, z, M, N, K)

    tune_key = GemmKey(m=bucket(M), n=bucket(N), k=bucket(K), dtype=a.dtype, precision=prec, activation=activation,
                       has_bias=has_bias, has_residual=has_res, a_unit_stride=a_unit, b_unit_stride=b_unit, tma=tma,
                       save_preact=save_z)
    es = a.element_size()
    cfg = _tuner.pick(tune_key, run, lambda: _prune(M, N, K, es, tma, relayout, nmajor, nmajor_copy, activation, f64),
                      tracing=is_fake(a, b), interpret_config=INTERPRET_CONFIG)
    return plan_for(cfg)


def _forced_plan(config: Config, flags: dict, a, b):
    """(plan, B as the kernel reads it) for a config given by the caller; a TMA config on operands that
    TMA cannot read is a ValueError (the tuner never offers one: see _tma_eligible), as is an F64 one on anything
    but fp32 "ieee" or combined with another kernel's flag."""
    if config.kwargs.get("F64", 0) and (flags["PRECISION"] != "ieee" or a.dtype != torch.float32
                                        or config.kwargs.get("TMA", 0) or config.kwargs.get("SPLIT_K", 1) > 1):
        raise ValueError(f"config {config}: F64=1, the fp64-accumulating pointer kernel, runs fp32 operands in "
                         f"precision 'ieee' without TMA or SPLIT_K; got {a.dtype} in precision {flags['PRECISION']!r}")
    if not config.kwargs.get("TMA", 0):
        return _bind(config, flags, False, False, False, 0), b
    if config.kwargs.get("NMAJOR", 0):
        if not nmajor_eligible(a, b, flags["PRECISION"], flags["INDEX_64"], bool(config.kwargs.get("A_RELAYOUT", 0))):
            raise ValueError(f"config {config} asks for the Gluon tf32 kernel, which needs precision='tf32' on fp32 "
                             "operands, a (with A_RELAYOUT: its copy) and b row-major and TMA-readable, 32-bit indices "
                             "and a Hopper GPU (compute capability 9.x)"
                             + ("" if GLUON_AVAILABLE else f"; and Triton 3.6 or later (this is {triton.__version__})"))
        return _bind(config, flags, False, False, False, sm_count(a, default=_INTERPRETER_SMS)), b
    if config.kwargs.get("B_RELAYOUT", 0):  # the copy (see plan_launches) is made here, once
        b = relayout(b)
    layout_a, layout_b = tma_layout(a), tma_layout(b)
    if layout_a is None or layout_b is None:
        raise ValueError(f"config {config} asks for the TMA kernel, but {'a' if layout_a is None else 'b'} "
                         "cannot be read through a TMA descriptor (it needs a unit stride, the other "
                         "stride and the base address 16-byte aligned)")
    return _bind(config, flags, layout_a[0], layout_b[0], False, sm_count(a, default=_INTERPRETER_SMS)), b


def index_64_needed(a, b, bias, residual, out, M: int, N: int) -> bool:
    """Whether the kernels need 64-bit index math: some element offset can pass 2**31 (a fresh C or Z is
    (M, N) contiguous)."""
    return M * N >= 2**31 or _needs_int64(a, b, bias, residual, out)


def find_plan(a, b, c, bias, residual, z, activation: str, prec: str, index_64: bool) -> _Plan:
    """The launch plan of this call's key (M, N, K > 0; ``prec``: the precision the kernel runs): kept
    per key, made (the tuner asked) the first time the key is met."""
    M, K = a.shape
    N = b.shape[1]
    has_bias, has_res, save_preact = bias is not None, residual is not None, z is not None
    a_unit, b_unit = a.stride(1) == 1, b.stride(1) == 1
    # the persistent TMA kernel where it can run (compiled graphs, traced with fake tensors, use the
    # pointer kernel); candidates on a re-laid-out copy of B where the copy keeps TMA's 16-byte row
    # alignment: tf32 with N-major B, 16-bit with K-major B
    tma = not is_fake(a, b) and _tma_eligible(a, b, M, N, K)
    relayout = tma and relayout_eligible(b, prec)
    # int(): a traced size may be symbolic; the key wants plain ints
    key = ((int(M) - 1).bit_length(), (int(N) - 1).bit_length(), (int(K) - 1).bit_length(), a.dtype, prec,
           activation, has_bias, has_res, a_unit, b_unit, tma, relayout, save_preact, index_64, a.get_device())
    plan = _PLANS.get(key)
    if plan is None:
        flags = _flags(has_bias, has_res, save_preact, activation, prec, index_64)
        plan = _make_plan(key, flags, a, b, c, bias, residual, z, M, N, K)
        if not is_fake(a, b):
            _PLANS[key] = plan
    return plan


def gemm_forward(a, b, bias=None, residual=None, activation="none", precision="ieee", save_preact=False,
                 out=None, config: Config | None = None, index_64: bool = False):
    """Launch the fused GEMM; returns (C, Z) where Z is the pre-activation (or None).

    config: force a launch configuration (autotune sweeps, tests); default: the tuner's choice.
    index_64: use the 64-bit index variant even where 32-bit offsets suffice (tests); it is always used
    where an element offset can pass 2**31."""
    M, K = a.shape
    N = b.shape[1]
    c = out if out is not None else torch.empty((M, N), device=a.device, dtype=a.dtype)
    z = torch.empty((M, N), device=a.device, dtype=a.dtype) if save_preact else None
    if M == 0 or N == 0:
        return c, z
    if K == 0:  # empty reduction: C = act(bias) (+ residual)
        zero = torch.zeros((M, 1), device=a.device, dtype=a.dtype)
        return gemm_forward(zero, torch.zeros((1, N), device=a.device, dtype=a.dtype), bias, residual,
                            activation, precision, save_preact, out, config, index_64)
    prec = precision if a.dtype == torch.float32 else "ieee"  # 16-bit inputs always use tensor cores
    index_64 = bool(index_64) or index_64_needed(a, b, bias, residual, out, M, N)
    if config is None:
        plan = find_plan(a, b, c, bias, residual, z, activation, prec, index_64)
    else:
        plan, b = _forced_plan(config, _flags(bias is not None, residual is not None, save_preact, activation, prec,
                                              index_64), a, b)
    _launch_plan(plan, a, b, c, bias, residual, z, M, N, K)
    return c, z


def _flags(has_bias: bool, has_res: bool, save_z: bool, activation: str, prec: str, index_64: bool) -> dict:
    """The GEMM kernels' epilogue and precision constexprs."""
    return dict(HAS_BIAS=has_bias, HAS_RES=has_res, SAVE_Z=save_z, ACT=activation,
                PRECISION=prec if prec in ("tf32", "tf32x3") else "ieee", INDEX_64=index_64)


_ACT_BLOCK = (32, 32) if INTERPRET else (64, 128)
# few rows: one program per column block walks the rows (_act_bwd_columns_kernel) and stores dbias whole,
# with no partials, counters or last-arrival merge (a backward whose time is its host path)
_ACT_COLUMNS_MAX_M = 1024
# 256 x 16: a strip of 16 columns walks the rows in few, wide steps (the pass is latency-bound: with 64 x 32,
# the Char-CNN fc1's 512 x 1024 took 13.3 us on an H100 in 32 programs of 8 dependent steps each)
_ACT_COLUMNS_BLOCK = (32, 32) if INTERPRET else (256, 16)
_ACT_KERNELS: dict[tuple, BoundKernel] = {}  # (act, store_dz, colsum, columns) -> bound kernel


def act_backward_buffers(dc, activation: str, need_dz: bool, need_dbias: bool, dbias_dtype) -> tuple:
    """(dZ, dbias, partials, counters) as the activation-backward pass writes them: dZ like dC (None when not
    needed or the activation is "none"); dbias None when not needed, else (N,) in ``dbias_dtype``; with more
    than _ACT_COLUMNS_MAX_M rows the column sums' fp32 partials (a row per tile row) and the stream's arrival
    counters (stream_buffers: reused per stream, fresh while torch.compile traces), else None for both."""
    M, N = dc.shape
    dz = torch.empty_like(dc) if (need_dz and activation != "none") else None
    if not need_dbias:
        return dz, None, None, None
    dbias = dc.new_empty((N,), dtype=dbias_dtype)
    if M <= _ACT_COLUMNS_MAX_M:
        return dz, dbias, None, None
    bm, bn = _ACT_BLOCK
    part, counters, _ = stream_buffers(dc, cdiv(M, bm) * N, cdiv(N, bn))
    return dz, dbias, part, counters


def act_backward_launch(dc, saved, dz, dbias, part, counters, activation: str) -> tuple:
    """The activation-backward pass on buffers from act_backward_buffers (M, N > 0; dZ or dbias given):
    (bound kernel, grid, runtime arguments by name). Absent tensors point at dC, unread."""
    M, N = dc.shape
    columns = dbias is not None and M <= _ACT_COLUMNS_MAX_M
    bm, bn = _ACT_COLUMNS_BLOCK if columns else _ACT_BLOCK
    key = (activation, dz is not None, dbias is not None, columns)
    kernel = _ACT_KERNELS.get(key)
    if kernel is None:
        kernel = _ACT_KERNELS[key] = bind(_act_bwd_columns_kernel if columns else _act_bwd_kernel, ACT=activation,
                                          STORE_DZ=key[1], COLSUM=key[2], BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    z = saved if saved is not None else dc
    dzt = dz if dz is not None else dc
    stride_dcm, stride_dcn = dc.stride()
    stride_zm, stride_zn = z.stride()
    stride_dzm, stride_dzn = dzt.stride()
    grid = ((N + bn - 1) // bn,) if columns else ((M + bm - 1) // bm, (N + bn - 1) // bn)
    return kernel, grid, dict(dc_ptr=dc, z_ptr=z, dz_ptr=dzt, dbias_ptr=dbias if dbias is not None else dc,
                              part_ptr=part if part is not None else dc,
                              count_ptr=counters if counters is not None else dc, M=M, N=N, stride_dcm=stride_dcm,
                              stride_dcn=stride_dcn, stride_zm=stride_zm, stride_zn=stride_zn, stride_dzm=stride_dzm,
                              stride_dzn=stride_dzn)


def act_backward_fixed(fixed, dc, saved, dz, dbias, part, counters, activation: str):
    """The activation-backward pass on act_backward_buffers' buffers through ``fixed``, the launch function this
    returned for an earlier call with the same layouts (every argument but the tensors fixed), or where it is None
    launched and fixed (launcher.launch_and_fix); returns the launch function. Absent tensors point at dC, unread."""
    if fixed is None:
        return launch_and_fix(*act_backward_launch(dc, saved, dz, dbias, part, counters, activation))
    fixed(dc, saved if saved is not None else dc, dz if dz is not None else dc, dbias if dbias is not None else dc,
          part if part is not None else dc, counters if counters is not None else dc)
    return fixed


def act_backward(dc, saved, activation, *, need_dz=True, need_dbias=False, dbias_dtype=torch.float32):
    """dZ = dC * act'(Z) and/or dbias = colsum(dZ) in one pass. Returns (dZ or None, dbias or None);
    dbias is summed in fp32 and returned in ``dbias_dtype``."""
    M, N = dc.shape
    dz, dbias, part, counters = act_backward_buffers(dc, activation, need_dz, need_dbias, dbias_dtype)
    if (dz is None and dbias is None) or M == 0 or N == 0:
        if dbias is not None and M == 0:
            dbias = torch.zeros((N,), device=dc.device, dtype=dbias_dtype)
        return (dz if dz is not None else dc if need_dz else None), dbias
    kernel, grid, args = act_backward_launch(dc, saved, dz, dbias, part, counters, activation)
    kernel.launch(grid, **args)
    return (dz if dz is not None else (dc if need_dz else None)), dbias


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _gemm_eager(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
                activation: str, precision: str, save_preact: bool, config: str) -> list:
    return list(gemm_forward(a, b, bias, residual, activation, precision, save_preact, config=config_from(config)))


def _gemm_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
             activation: str, precision: str, save_preact: bool, config: str) -> list[torch.Tensor]:
    c, z = _gemm_eager(a, b, bias, residual, activation, precision, save_preact, config)
    return [c, z if z is not None else c.new_empty((0,))]


def _act_backward_eager(dc: torch.Tensor, saved: torch.Tensor, activation: str, need_dz: bool, need_dbias: bool,
                        dbias_dtype: torch.dtype) -> list:
    return list(act_backward(dc, saved if saved.numel() else None, activation, need_dz=need_dz,
                             need_dbias=need_dbias, dbias_dtype=dbias_dtype))


def _act_backward_op(dc: torch.Tensor, saved: torch.Tensor, activation: str, need_dz: bool, need_dbias: bool,
                     dbias_dtype: torch.dtype) -> list[torch.Tensor]:
    dz, dbias = _act_backward_eager(dc, saved, activation, need_dz, need_dbias, dbias_dtype)
    # outputs must not alias inputs of a custom op: copy the pass-through case
    dz = dz.clone() if (dz is not None and dz is dc) else dz
    return [dz if dz is not None else dc.new_empty((0,)),
            dbias if dbias is not None else dc.new_empty((0,), dtype=dbias_dtype)]


def _setup_context(ctx, inputs, output):
    a, b, bias, residual, activation, precision, save_preact, _ = inputs
    c, z = output
    ctx.activation, ctx.precision = activation, precision
    ctx.has_bias, ctx.has_res = bias is not None, residual is not None
    ctx.bias_dtype = bias.dtype if bias is not None else None
    if activation == "none":
        saved = None
    elif save_preact:
        saved = z
    else:  # relu with no residual: the output carries the sign of Z
        saved = c
    ctx.save_for_backward(a, b, saved, bias if activation in CURVED else None)


def grad_b_transposed(b: torch.Tensor) -> bool:
    """Whether dB = A^T dZ is computed as (dZ^T A)^T, i.e. written in B's layout: B stored K-major (as
    nn.Linear's weight.t() is), so the weight's gradient comes out in its own (out_features, in_features)
    layout and autograd keeps it as it is instead of copying it."""
    return b.stride(0) == 1 and b.stride(1) != 1


def backward_ops(dc, a, b, saved, needs, activation: str, precision: str, bias_dtype, bias=None,
                 fused: Optional[bool] = None) -> tuple:
    """(dA, dB, dbias, dresidual) of C = act(A @ B + bias) (+ residual) through the registered ops (traced
    by torch.compile); in grad mode (a double backward, create_graph=True) the activation's backward and
    dbias run in torch's ops and the GEMMs through the differentiable GEMM op -- for a CURVED activation
    on Z = A @ B + bias recomputed by that op (``bias`` is needed then) -- so the result is differentiable
    again. ``needs``: which of the four are wanted; ``saved``: Z, or relu's output, or None for no
    activation. ``fused``: the one-launch backward (gemm_backward.py) where it can run (True) or never
    (False); default: where gemm_backward.applies."""
    need_a, need_b, need_bias, need_res = needs
    (M, K), N = a.shape, b.shape[1]
    if (not torch.is_grad_enabled() and M and N and K
            and (gemm_backward.applies(M, N, K, activation, needs) if fused is None
                 else fused and gemm_backward.can_run(activation, needs))):
        da, db_, dbias = gemm_backward.backward(dc, a, b, saved, need_a, need_bias, activation, precision,
                                                bias_dtype or torch.float32, grad_b_transposed(b))
        return da, db_, dbias, dc if need_res else None
    dz = dc
    dbias = None
    if torch.is_grad_enabled():
        if activation in CURVED:  # Z as a function of A, B and bias: none flows back through the saved Z
            saved = _gemm_call(a, b, bias, None, "none", precision, False, "")[0]
        dz, dbias = double_backward.act_backward(dc, saved, activation, bool(need_bias), bias_dtype or torch.float32)
    elif activation != "none" or need_bias:
        dz_, db = _act_backward_call(dc, saved if saved is not None else dc.new_empty((0,)), activation,
                                     activation != "none", bool(need_bias), bias_dtype or torch.float32)
        if activation != "none":
            dz = dz_
        dbias = db if need_bias else None
    da = _gemm_call(dz, b.t(), None, None, "none", precision, False, "")[0] if need_a else None
    db_ = None
    if need_b and grad_b_transposed(b):
        db_ = _gemm_call(dz.t(), a, None, None, "none", precision, False, "")[0].t()
    elif need_b:
        db_ = _gemm_call(a.t(), dz, None, None, "none", precision, False, "")[0]
    return da, db_, dbias, dc if need_res else None


def _backward(ctx, grads):
    a, b, saved, bias = ctx.saved_tensors
    need_a, need_b, need_bias, need_res = ctx.needs_input_grad[:4]
    needs = (need_a, need_b, need_bias and ctx.has_bias, need_res and ctx.has_res)
    return (*backward_ops(grads[0], a, b, saved, needs, ctx.activation, ctx.precision, ctx.bias_dtype, bias),
            None, None, None, None)


_act_backward_call = register_op("tk::act_backward", _act_backward_op, eager=_act_backward_eager)
_gemm_call = register_op("tk::gemm", _gemm_op, setup_context=_setup_context, backward=_backward, eager=_gemm_eager)


def _save_preact(activation, a, b, bias, residual) -> bool:
    """Whether the forward saves Z for the backward: either GELU, or relu with a residual added after it
    (else the backward reads relu's sign off the output), when a gradient is needed."""
    if activation not in ("gelu", "gelu_tanh") and (activation != "relu" or residual is None):
        return False
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)
                                        or (residual is not None and residual.requires_grad))


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
         activation: str = "none", precision: str | None = None, *, config: Config | None = None) -> torch.Tensor:
    """C = act(A @ B + bias) (+ residual), differentiable and torch.compile-friendly.

    precision (fp32 inputs): "ieee" (fp32 FMA, or on Hopper exact products summed in fp64), "tf32" (tensor cores),
    "tf32x3" (three tf32 products, hi*hi + hi*lo + lo*hi: about fp32 accuracy on the tensor cores) or None: torch's
    own matmul's ("tf32" where torch allows TF32 for matmuls, else "ieee"). Under autocast A, B and bias are cast to
    its dtype, as torch casts linear's, and C comes in it (runtime.torch_matmul_operands; a residual is read as it
    is). config: the forward GEMM's launch configuration (tests choose a kernel path with it); default, and always
    for the backward's: tuned.
    """
    precision, a, b, bias = torch_matmul_operands(precision, a, b, bias)  # autocast's casts, torch's tf32 setting
    key, call = gemm_eager.lookup("gemm", a, b, bias, residual, activation, precision, config)
    if call is not None:  # a signature seen before: its prepared call
        return call(a, b, bias, residual)
    _validate(a, b, bias, residual, activation, precision, config=config)
    save_preact = _save_preact(activation, a, b, bias, residual)
    c = _gemm_call(a, b, bias, residual, activation, precision, save_preact, config_str(config))[0]
    gemm_eager.remember(key, a, b, bias, residual, activation, precision, save_preact, config, weight=False)
    return c


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none",
           residual: torch.Tensor | None = None, precision: str | None = None, *,
           config: Config | None = None) -> torch.Tensor:
    """act(x @ weight^T + bias) (+ residual) for x of shape (..., in_features), as nn.functional.linear;
    residual has the output's shape (..., out_features). Errors name x / weight / bias / residual.
    precision, autocast and config: as for :func:`gemm`."""
    precision, x, weight, bias = torch_matmul_operands(precision, x, weight, bias)
    key, call = gemm_eager.lookup("linear", x, weight, bias, residual, activation, precision, config)
    if call is not None:  # a signature seen before: its prepared call
        return call(x, weight, bias, residual)
    check_tensor("x", x, ndim=_X_DIMS, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_DTYPES)
    check_tensor("weight", weight, ndim=2)
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features but weight expects {weight.shape[1]} "
                         f"(weight {tuple(weight.shape)})")
    rows = x.ndim == 2  # already (M, K): no reshapes
    if residual is not None:
        check_tensor("residual", residual)
        if residual.shape != (*x.shape[:-1], weight.shape[0]):
            raise ValueError(f"residual has shape {tuple(residual.shape)}, expected the output's "
                             f"{(*x.shape[:-1], weight.shape[0])}")
    x2 = x if rows else x.reshape(-1, x.shape[-1])
    r2 = residual if (rows or residual is None) else residual.reshape(-1, residual.shape[-1])
    w_t = weight.t()
    _validate(x2, w_t, bias, r2, activation, precision, names=("x", "weight"), a_checked=True, config=config)
    save_preact = _save_preact(activation, x2, w_t, bias, r2)
    y = _gemm_call(x2, w_t, bias, r2, activation, precision, save_preact, config_str(config))[0]
    out_shape = None if rows else (*x.shape[:-1], weight.shape[0])
    gemm_eager.remember(key, x2, w_t, bias, r2, activation, precision, save_preact, config, weight=True,
                        out_shape=out_shape)
    return y if rows else y.reshape(out_shape)


from . import gemm_eager  # noqa: E402  (it builds on this module's plans and launchers)
