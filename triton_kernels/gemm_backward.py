"""The backward of a short GEMM in one launch: C = act(A @ B + bias) with act "none" or "relu".

With dZ = dC * act'(Z) (relu: dC where Z > 0, read off the saved output C or Z),
    dA = dZ @ B^T      (M, K), a sum over N
    dB = A^T @ dZ      (K, N), a sum over M, written with dB's strides (nn.Linear's weight: (N, K) row-major)
    dbias = sum over the rows of dZ
gemm.py's backward takes three launches for these (the activation pass storing dZ and dbias, then one GEMM
each) and two allocations more; for the studies' small Linears (MNIST 128 x 784 -> 10, the SGEMM MLPs'
1024 x 16 -> 16, the Char-CNN's classifier) those launches, not their few microseconds of math, set the
time of a training step. Here one grid holds the tiles of both products: programs [0, tiles of dA) each
compute a BLOCK_M x BLOCK_N tile of dA, the rest a BLOCK_M x BLOCK_N tile of dB (rows of K, columns of N).
Each walks its sum in steps of BLOCK_K, forming the dZ tile it needs in registers from dC and the saved
tensor (never stored), and the dB programs of the first row of tiles also sum their dZ tiles' columns into
dbias. dZ is rounded to the operands' dtype before the product, as gemm.py stores it, so both give the same
dZ; only the order of the sums differs.

dZ is recomputed by every program that reads it: ~2K/BLOCK elementwise derivative evaluations per
element, negligible for relu but a second GEMM's worth of work for GELU's erf and exp, which stays on
gemm.py's three launches. ``applies`` says where this kernel is used; ``fused_backward`` launches it.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from autotune import spaces

from .gemm_kernels import _act_bwd_tile, _tile_coords
from .launcher import bind
from .runtime import Autotuner, bucket, cdiv, is_fake, register_op, register_tuner

ACTIVATIONS = ("none", "relu")
# the fused backward runs where its 4 M N K multiply-adds are at most this many FLOPs: the Char-CNN's fc2
# (512 x 1024 -> 1024, 2.1e9) and everything smaller. Larger GEMMs run gemm.py's three launches, whose
# persistent TMA kernels are faster once the GPU time, not the launches, sets the step (H100, replayed from
# CUDA graphs: fc1, 512 x 8704 -> 1024, 1.8e10 FLOPs, took 140 us fused against 91 us in three launches)
FUSED_MAX_FLOPS = 2**32


# ----------------------------------------------------------------------------------------------------
# Kernel
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _gemm_backward_kernel(
    dc_ptr, saved_ptr, a_ptr, b_ptr, da_ptr, db_ptr, dbias_ptr,
    M, N, K,
    stride_dcm, stride_dcn, stride_sm, stride_sn, stride_am, stride_ak, stride_bk, stride_bn,
    stride_dam, stride_dak, stride_dbk, stride_dbn,
    ACT: tl.constexpr, NEED_A: tl.constexpr, NEED_BIAS: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """dA (NEED_A), dB and dbias (NEED_BIAS) of C = act(A @ B + bias), one output tile per program (see the
    module's docstring). BLOCK_K is the step of each program's sum: over N for dA, over M for dB."""
    tiles_a = tl.cdiv(M, BLOCK_M) * tl.cdiv(K, BLOCK_N) if NEED_A else 0
    pid = tl.program_id(0)
    steps = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if pid < tiles_a:  # a tile of dA: rows of M, columns of K, the sum over N
        pid_m, pid_k = _tile_coords(pid, M, K, BLOCK_M, BLOCK_N, GROUP_M)
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = (pid_k * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        for n0 in range(0, N, BLOCK_K):
            ns = n0 + steps
            dz = _act_bwd_tile(dc_ptr, saved_ptr, dc_ptr, rows, ns, M, N, stride_dcm, stride_dcn, stride_sm,
                               stride_sn, 0, 0, ACT, False)
            bt = tl.load(b_ptr + cols[None, :] * stride_bk + ns[:, None] * stride_bn,
                         mask=(ns[:, None] < N) & (cols[None, :] < K), other=0.0)  # B^T: (BLOCK_K of N, BLOCK_N of K)
            acc = tl.dot(dz.to(bt.dtype), bt, acc, input_precision=PRECISION)
        tl.store(da_ptr + rows[:, None] * stride_dam + cols[None, :] * stride_dak, acc.to(da_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < K))
    else:  # a tile of dB: rows of K, columns of N, the sum over M; dbias from the first row of tiles
        pid_k, pid_n = _tile_coords(pid - tiles_a, K, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = (pid_k * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        colsum = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for m0 in range(0, M, BLOCK_K):
            ms = m0 + steps
            at = tl.load(a_ptr + ms[None, :] * stride_am + rows[:, None] * stride_ak,
                         mask=(rows[:, None] < K) & (ms[None, :] < M), other=0.0)  # A^T: (BLOCK_M of K, BLOCK_K of M)
            dz = _act_bwd_tile(dc_ptr, saved_ptr, dc_ptr, ms, cols, M, N, stride_dcm, stride_dcn, stride_sm,
                               stride_sn, 0, 0, ACT, False)
            acc = tl.dot(at, dz.to(at.dtype), acc, input_precision=PRECISION)
            if NEED_BIAS:
                colsum += tl.sum(dz, axis=0)
        tl.store(db_ptr + rows[:, None] * stride_dbk + cols[None, :] * stride_dbn, acc.to(db_ptr.dtype.element_ty),
                 mask=(rows[:, None] < K) & (cols[None, :] < N))
        if NEED_BIAS:
            if pid_k == 0:
                tl.store(dbias_ptr + cols, colsum.to(dbias_ptr.dtype.element_ty), mask=cols < N)


# ----------------------------------------------------------------------------------------------------
# Tuner and launcher
# ----------------------------------------------------------------------------------------------------
class BackwardKey(NamedTuple):
    """What a tuned config of the fused backward depends on (the cache entry's fields)."""
    m: int  # buckets: the next power of two
    n: int
    k: int
    dtype: torch.dtype
    precision: str
    activation: str
    need_a: bool
    need_bias: bool
    a_unit_stride: bool  # A row-major (K contiguous)
    b_unit_stride: bool  # B row-major (N contiguous); nn.Linear's weight.t() is not


_tuner = register_tuner(Autotuner("gemm_backward", [_gemm_backward_kernel, _act_bwd_tile, _tile_coords],
                                  spaces.GEMM_BACKWARD_CONFIGS, interpret_config=spaces.GEMM_BACKWARD_INTERPRET_CONFIG))
_PLANS: dict[tuple, tuple] = {}  # (key, device index) -> (bound kernel, BLOCK_M, BLOCK_N); offsets are 64-bit


def can_run(activation: str, needs: tuple) -> bool:
    """Whether the fused kernel can serve this backward: relu or no activation, dB wanted (its programs also
    hold dbias). ``needs``: (dA, dB, dbias, dresidual) wanted."""
    return bool(needs[1]) and activation in ACTIVATIONS


def applies(M: int, N: int, K: int, activation: str, needs: tuple) -> bool:
    """Whether the backward of this GEMM runs fused (gemm.py's and the prepared calls' rule): it can, and
    it is at most FUSED_MAX_FLOPS of math."""
    return can_run(activation, needs) and 4 * M * N * K <= FUSED_MAX_FLOPS


def buffers(dc, a, b, need_a: bool, need_bias: bool, bias_dtype, b_transposed: bool) -> tuple:
    """(dA or None, dB, dbias or None) as the kernel writes them: dB in B's layout when ``b_transposed``
    (gemm.grad_b_transposed: a (N, K) row-major tensor, returned as its transpose)."""
    M, K = a.shape
    N = b.shape[1]
    da = dc.new_empty((M, K)) if need_a else None
    db = dc.new_empty((N, K)).t() if b_transposed else dc.new_empty((K, N))
    dbias = dc.new_empty((N,), dtype=bias_dtype) if need_bias else None
    return da, db, dbias


def _plan(dc, saved, a, b, da, db, dbias, activation: str, precision: str):
    """(bound kernel, BLOCK_M, BLOCK_N) of this call's key, tuned the first time the key is met."""
    M, K = a.shape
    N = b.shape[1]
    prec = precision if a.dtype == torch.float32 and precision in ("tf32", "tf32x3") else "ieee"
    key = BackwardKey(bucket(M), bucket(N), bucket(K), a.dtype, prec, activation, da is not None, dbias is not None,
                      a.stride(1) == 1, b.stride(1) == 1)
    plan = _PLANS.get((key, a.get_device()))
    if plan is None:
        def bound(cfg):
            return bind(_gemm_backward_kernel, ACT=activation, NEED_A=key.need_a, NEED_BIAS=key.need_bias,
                        PRECISION=prec, **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

        def run(cfg):
            kernel, grid, args = _launch(bound(cfg), cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], dc, saved, a, b,
                                         da, db, dbias)
            kernel.launch(grid, **args)

        cfg = _tuner.pick(key, run, lambda: spaces.candidates("gemm_backward", M=M, N=N, K=K, dtype=a.dtype),
                          tracing=is_fake(dc, a, b))
        plan = (bound(cfg), cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"])
        if not is_fake(dc, a, b):
            _PLANS[(key, a.get_device())] = plan
    return plan


def _launch(kernel, block_m: int, block_n: int, dc, saved, a, b, da, db, dbias) -> tuple:
    """(bound kernel, grid, runtime arguments by name); absent tensors point at dC, unread."""
    M, K = a.shape
    N = b.shape[1]
    tiles = (cdiv(M, block_m) * cdiv(K, block_n) if da is not None else 0) + cdiv(K, block_m) * cdiv(N, block_n)
    s = saved if saved is not None else dc
    dat = da if da is not None else dc
    return kernel, (tiles,), dict(
        dc_ptr=dc, saved_ptr=s, a_ptr=a, b_ptr=b, da_ptr=dat, db_ptr=db, dbias_ptr=dbias if dbias is not None else dc,
        M=M, N=N, K=K, stride_dcm=dc.stride(0), stride_dcn=dc.stride(1), stride_sm=s.stride(0), stride_sn=s.stride(1),
        stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_dam=dat.stride(0), stride_dak=dat.stride(1), stride_dbk=db.stride(0), stride_dbn=db.stride(1))


def launch_args(dc, saved, a, b, da, db, dbias, activation: str, precision: str) -> tuple:
    """The fused backward's launch on buffers from ``buffers``: (bound kernel, grid, arguments by name)."""
    kernel, block_m, block_n = _plan(dc, saved, a, b, da, db, dbias, activation, precision)
    return _launch(kernel, block_m, block_n, dc, saved, a, b, da, db, dbias)


def fused_backward(dc, a, b, saved, need_a: bool, need_bias: bool, activation: str, precision: str, bias_dtype,
                   b_transposed: bool) -> tuple:
    """(dA or None, dB, dbias or None) of C = act(A @ B + bias) in one launch (M, N, K > 0; see ``applies``).
    ``saved``: relu's output or Z (None for no activation)."""
    da, db, dbias = buffers(dc, a, b, need_a, need_bias, bias_dtype, b_transposed)
    kernel, grid, args = launch_args(dc, saved, a, b, da, db, dbias, activation, precision)
    kernel.launch(grid, **args)
    return da, db, dbias


# ----------------------------------------------------------------------------------------------------
# torch op (gemm.backward_ops calls it, so torch.compile traces it)
# ----------------------------------------------------------------------------------------------------
def _fused_backward_op(dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, saved: torch.Tensor, need_a: bool,
                       need_bias: bool, activation: str, precision: str, bias_dtype: torch.dtype,
                       b_transposed: bool) -> list[torch.Tensor]:
    da, db, dbias = fused_backward(dc, a, b, saved if saved.numel() else None, need_a, need_bias, activation,
                                   precision, bias_dtype, b_transposed)
    return [da if da is not None else dc.new_empty((0,)), db,
            dbias if dbias is not None else dc.new_empty((0,), dtype=bias_dtype)]


_fused_backward_call = register_op("tk::gemm_fused_backward", _fused_backward_op)


def backward(dc, a, b, saved, need_a: bool, need_bias: bool, activation: str, precision: str, bias_dtype,
             b_transposed: bool) -> tuple:
    """``fused_backward`` through the registered op (torch.compile traces it); (dA or None, dB, dbias or None)."""
    da, db, dbias = _fused_backward_call(dc, a, b, saved if saved is not None else dc.new_empty((0,)), bool(need_a),
                                         bool(need_bias), activation, precision, bias_dtype, bool(b_transposed))
    return (da if need_a else None), db, (dbias if need_bias else None)
