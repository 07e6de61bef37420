"""One SGD step of softmax regression (a single linear layer + softmax cross-entropy), fused in two kernels.

Math, for the batch rows i = perm[s*B : s*B + n] of step s (n = B, or fewer for the last batch):
    z_i   = W x_i + b                          W (C, K), b (C,), x_i (K,)      (C <= 16 classes)
    p_i   = softmax(z_i),  loss_i = logsumexp(z_i) - z_i[y_i],  correct_i = [argmax z_i == y_i]
    dz_i  = (p_i - onehot(y_i)) / n            (gradient of the batch-mean loss)
    dW    = sum_i dz_i x_i^T,   db = sum_i dz_i
    W    -= lr * dW,            b -= lr * db
Running sums of loss_i and correct_i stay on the device; the host reads them when it wants to.

Kernels (both launch with no host-side state, so one step, or a whole epoch, can be captured in a
CUDA graph and replayed):
  1. `_sr_forward_backward_kernel`, grid P = cdiv(B, BLOCK_B): program p takes batch rows
     [p*BLOCK_B, (p+1)*BLOCK_B), gathers them through the permutation (no shuffled copy of X), computes
     the logits (walks K in BLOCK_K chunks: tl.dot of a BLOCK_B x BLOCK_K tile of X with a
     BLOCK_K x 16 tile of W^T), the softmax, loss, correct-count and dz, then walks K again (the X tiles
     it just read are in L1/L2) to write its partial dW_p = dz_p^T X_p (16 x K), its db_p and its
     loss/correct partial sums. The X read is spread over P SMs: 401 KB per step at batch 128.
  2. `_sr_update_kernel`, grid cdiv(K, BLOCK_KU): program q sums the P partials of its K slice in a
     fixed order (deterministic, no atomics) and updates W[:, slice] in place; program 0 also updates b,
     adds the loss/correct partials into the running sums and advances the device step counter
     (wrapping to 0 after the last step of an epoch).
The step index is read from a device counter, so the same launch (or graph replay) serves every step.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from .runtime import INTERPRET, Autotuner, Config, bucket, check_tensor, register_tuner

BLOCK_C = 16  # classes padded to the smallest tl.dot tile
X_DTYPES = (torch.float32, torch.uint8)
INDEX_DTYPES = (torch.int32, torch.int64)
PRECISIONS = ("ieee", "tf32")


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _sr_forward_backward_kernel(
    x_ptr, y_ptr, perm_ptr, w_ptr, b_ptr, step_ptr,
    gw_ptr, gb_ptr, loss_part_ptr, correct_part_ptr,
    N, K, C, B, x_scale,
    stride_xn, stride_xk, stride_wc, stride_wk,
    X_IS_U8: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Forward + loss + backward for BLOCK_B rows of the batch -> partial gradients of program p.

    x_ptr: (N, K) fp32 (or uint8, scaled by x_scale) dataset, y_ptr: (N,) labels, perm_ptr: (N,) order,
    w_ptr: (C, K), b_ptr: (C,), step_ptr: (1,) int32 step counter,
    gw_ptr: (P, BLOCK_C, K) partial dW, gb_ptr: (P, BLOCK_C) partial db,
    loss_part_ptr: (P,) fp32, correct_part_ptr: (P,) int32.
    """
    pid = tl.program_id(0)
    step = tl.load(step_ptr)
    start = step.to(tl.int64) * B
    left = N - start
    n_rows = tl.where(left < B, left, B).to(tl.int32)  # the last batch of an epoch may be partial

    offs_b = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    row_ok = offs_b < n_rows
    idx = tl.load(perm_ptr + start + offs_b, mask=row_ok, other=0).to(tl.int64)
    label = tl.load(y_ptr + idx, mask=row_ok, other=0).to(tl.int32)
    offs_c = tl.arange(0, BLOCK_C)
    col_ok = offs_c < C
    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + idx[:, None] * stride_xn

    # pass 1 over K: logits z = X_p W^T (BLOCK_B x BLOCK_C)
    z = tl.zeros((BLOCK_B, BLOCK_C), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_rows + kk[None, :] * stride_xk, mask=row_ok[:, None] & (kk[None, :] < K), other=0.0)
        x = x.to(tl.float32)
        if X_IS_U8:
            x = x * x_scale
        wt = tl.load(w_ptr + offs_c[None, :] * stride_wc + kk[:, None] * stride_wk,
                     mask=col_ok[None, :] & (kk[:, None] < K), other=0.0)
        z = tl.dot(x, wt, z, input_precision=PRECISION)
    z += tl.load(b_ptr + offs_c, mask=col_ok, other=0.0)[None, :]

    # softmax cross-entropy, correct count, dz (all in fp32 registers)
    z = tl.where(col_ok[None, :], z, float("-inf"))
    m = tl.max(z, axis=1)
    e = tl.exp(z - m[:, None])
    s = tl.sum(e, axis=1)
    onehot = offs_c[None, :] == label[:, None]
    z_y = tl.sum(tl.where(onehot, z, 0.0), axis=1)
    loss = m + tl.log(s) - z_y
    pred = tl.argmax(z, axis=1)
    correct = (pred == label) & row_ok
    inv_n = 1.0 / n_rows.to(tl.float32)
    dz = (e / s[:, None] - onehot.to(tl.float32)) * inv_n
    dz = tl.where(row_ok[:, None] & col_ok[None, :], dz, 0.0)

    tl.store(loss_part_ptr + pid, tl.sum(tl.where(row_ok, loss, 0.0), axis=0))
    tl.store(correct_part_ptr + pid, tl.sum(correct.to(tl.int32), axis=0))
    tl.store(gb_ptr + pid * BLOCK_C + offs_c, tl.sum(dz, axis=0))

    # pass 2 over K: partial dW_p = dz^T X_p (BLOCK_C x BLOCK_K per chunk); rows >= C are zeros
    dzt = tl.trans(dz)
    gw_rows = gw_ptr + pid.to(tl.int64) * BLOCK_C * K + offs_c[:, None] * K
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_rows + kk[None, :] * stride_xk, mask=row_ok[:, None] & (kk[None, :] < K), other=0.0)
        x = x.to(tl.float32)
        if X_IS_U8:
            x = x * x_scale
        g = tl.dot(dzt, x, input_precision=PRECISION)
        tl.store(gw_rows + kk[None, :], g, mask=col_ok[:, None] & (kk[None, :] < K))


@triton.jit
def _sr_update_kernel(
    w_ptr, b_ptr, gw_ptr, gb_ptr, loss_part_ptr, correct_part_ptr,
    step_ptr, loss_sum_ptr, correct_sum_ptr,
    P, K, C, n_steps, lr,
    stride_wc, stride_wk,
    BLOCK_P: tl.constexpr, BLOCK_KU: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """W[:, slice] -= lr * sum_p gw[p, :, slice] for the K slice of this program; program 0 also does
    b -= lr * sum_p gb[p], the running loss / correct sums and step = (step + 1) % n_steps."""
    pid = tl.program_id(0)
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = pid * BLOCK_KU + tl.arange(0, BLOCK_KU)
    mask = (offs_c[:, None] < C) & (offs_k[None, :] < K)
    g = tl.zeros((BLOCK_C, BLOCK_KU), dtype=tl.float32)
    gw_tile = gw_ptr + offs_c[:, None] * K + offs_k[None, :]
    for p in range(0, P):  # fixed order: bitwise reproducible
        g += tl.load(gw_tile + p * BLOCK_C * K, mask=mask, other=0.0)
    w_tile = w_ptr + offs_c[:, None] * stride_wc + offs_k[None, :] * stride_wk
    w = tl.load(w_tile, mask=mask, other=0.0)
    tl.store(w_tile, w - lr * g, mask=mask)

    if pid == 0:
        offs_p = tl.arange(0, BLOCK_P)
        p_ok = offs_p < P
        gb = tl.sum(tl.load(gb_ptr + offs_p[:, None] * BLOCK_C + offs_c[None, :], mask=p_ok[:, None], other=0.0),
                    axis=0)
        c_ok = offs_c < C
        bias = tl.load(b_ptr + offs_c, mask=c_ok, other=0.0)
        tl.store(b_ptr + offs_c, bias - lr * gb, mask=c_ok)
        loss = tl.sum(tl.load(loss_part_ptr + offs_p, mask=p_ok, other=0.0), axis=0)
        correct = tl.sum(tl.load(correct_part_ptr + offs_p, mask=p_ok, other=0), axis=0)
        tl.store(loss_sum_ptr, tl.load(loss_sum_ptr) + loss)
        tl.store(correct_sum_ptr, tl.load(correct_sum_ptr) + correct)
        step = tl.load(step_ptr) + 1
        tl.store(step_ptr, tl.where(step >= n_steps, 0, step))


# ----------------------------------------------------------------------------------------------------
# Autotuning space: (rows per program, K chunk, warps) for kernel 1, (K slice, warps) for kernel 2.
# At batch 128 on an H100: P = 128 / BLOCK_B programs each read 128*784*4/P bytes of X.
# ----------------------------------------------------------------------------------------------------
def _cfg(bb, bk, warps, bku, warps_u, stages=2):
    return Config({"BLOCK_B": bb, "BLOCK_K": bk, "BLOCK_KU": bku, "WARPS_U": warps_u}, warps, stages)


STEP_CONFIGS = [
    _cfg(16, 64, 2, 128, 4), _cfg(16, 128, 4, 128, 4), _cfg(16, 256, 4, 128, 4), _cfg(16, 128, 4, 64, 2),
    _cfg(16, 64, 4, 256, 4), _cfg(32, 64, 4, 128, 4), _cfg(32, 128, 4, 128, 4), _cfg(32, 128, 8, 64, 2),
    _cfg(32, 256, 8, 128, 4), _cfg(64, 64, 4, 128, 4), _cfg(64, 128, 8, 128, 4), _cfg(16, 128, 2, 256, 8),
]
INTERPRET_CONFIG = _cfg(16, 128, 4, 256, 4, stages=1)
_tuner = register_tuner(Autotuner("softmax_regression_step", [_sr_forward_backward_kernel, _sr_update_kernel],
                                  STEP_CONFIGS, interpret_config=INTERPRET_CONFIG))


def _fits(cfg: Config, batch_size: int) -> bool:
    return cfg.kwargs["BLOCK_B"] <= max(16, triton.next_power_of_2(batch_size))


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def _is_fake(*ts) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return any(isinstance(t, (FakeTensor, FunctionalTensor)) for t in ts)


def _launch(kernel, grid, *args, **kwargs):
    """Direct launch (lowest overhead); through wrap_triton when torch.compile traces the op."""
    if not INTERPRET and _is_fake(*(a for a in args if isinstance(a, torch.Tensor))):
        torch.library.wrap_triton(kernel)[grid](*args, **kwargs)
    else:
        kernel[grid](*args, **kwargs)


def validate(weight, bias, x, y, perm, batch_size, lr, precision="ieee") -> None:
    """Check every argument of a step; raises ValueError naming the argument (no launch happens)."""
    check_tensor("weight", weight, ndim=2, dtypes=(torch.float32,))
    dev = weight.device
    check_tensor("bias", bias, ndim=1, dtypes=(torch.float32,), device=dev)
    check_tensor("x", x, ndim=2, dtypes=X_DTYPES, device=dev)
    check_tensor("y", y, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    C, K = weight.shape
    if not 1 <= C <= BLOCK_C:
        raise ValueError(f"weight has {C} classes (rows); this kernel supports 1..{BLOCK_C}")
    if K < 1:
        raise ValueError(f"weight has {K} features; need at least 1")
    if bias.shape[0] != C:
        raise ValueError(f"bias has {bias.shape[0]} elements, expected {C} (weight {tuple(weight.shape)})")
    if not bias.is_contiguous():
        raise ValueError("bias must be contiguous")
    if x.shape[1] != K:
        raise ValueError(f"x has {x.shape[1]} features but weight expects {K}")
    N = x.shape[0]
    if N < 1:
        raise ValueError("x is empty: need at least one example")
    if y.shape[0] != N:
        raise ValueError(f"y has {y.shape[0]} labels but x has {N} rows")
    if perm.shape[0] != N or not perm.is_contiguous():
        raise ValueError(f"perm must be a contiguous permutation of the {N} rows of x, got shape {tuple(perm.shape)}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


@dataclasses.dataclass
class StepBuffers:
    """Static device buffers of the fused step (allocated once; nothing is allocated per step)."""

    step: torch.Tensor          # (1,) int32: the step within the epoch
    loss_sum: torch.Tensor      # (1,) fp32: running sum of per-example losses
    correct_sum: torch.Tensor   # (1,) int32: running count of correct predictions
    gw: torch.Tensor            # (P_max, 16, K) fp32 partial dW
    gb: torch.Tensor            # (P_max, 16) fp32 partial db
    loss_part: torch.Tensor     # (P_max,) fp32
    correct_part: torch.Tensor  # (P_max,) int32

    @classmethod
    def allocate(cls, K: int, batch_size: int, device) -> "StepBuffers":
        p_max = triton.cdiv(batch_size, 16)
        f32 = dict(device=device, dtype=torch.float32)
        i32 = dict(device=device, dtype=torch.int32)
        return cls(torch.zeros(1, **i32), torch.zeros(1, **f32), torch.zeros(1, **i32),
                   torch.zeros(p_max, BLOCK_C, K, **f32), torch.zeros(p_max, BLOCK_C, **f32),
                   torch.zeros(p_max, **f32), torch.zeros(p_max, **i32))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def clone(self) -> "StepBuffers":
        return StepBuffers(*(t.clone() for t in self.tensors()))


def launch_step(weight, bias, x, y, perm, buf: StepBuffers, batch_size: int, lr: float, cfg: Config,
                precision: str = "ieee") -> None:
    """Launch the two kernels of one step (no validation, no allocation, no host sync)."""
    N, K = x.shape
    C = weight.shape[0]
    bb = cfg.kwargs["BLOCK_B"]
    P = triton.cdiv(batch_size, bb)
    n_steps = triton.cdiv(N, batch_size)
    _launch(_sr_forward_backward_kernel, (P,),
            x, y, perm, weight, bias, buf.step, buf.gw, buf.gb, buf.loss_part, buf.correct_part,
            N, K, C, batch_size, 1.0 / 255.0, x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
            X_IS_U8=x.dtype == torch.uint8, PRECISION=precision,
            BLOCK_B=bb, BLOCK_K=cfg.kwargs["BLOCK_K"], BLOCK_C=BLOCK_C,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    bku = cfg.kwargs["BLOCK_KU"]
    _launch(_sr_update_kernel, (triton.cdiv(K, bku),),
            weight, bias, buf.gw, buf.gb, buf.loss_part, buf.correct_part, buf.step, buf.loss_sum,
            buf.correct_sum, P, K, C, n_steps, float(lr), weight.stride(0), weight.stride(1),
            BLOCK_P=max(2, triton.next_power_of_2(P)), BLOCK_KU=bku, BLOCK_C=BLOCK_C,
            num_warps=cfg.kwargs["WARPS_U"], num_stages=1)


def pick_config(weight, bias, x, y, perm, batch_size: int, lr: float, precision: str = "ieee") -> Config:
    """The tuned config for this shape; tuning runs on clones, so the real weights are untouched."""
    if INTERPRET:
        return INTERPRET_CONFIG
    key = (bucket(batch_size), x.shape[1], weight.shape[0], str(x.dtype), precision)
    configs = [c for c in STEP_CONFIGS if _fits(c, batch_size)]
    scratch = None

    def run(cfg: Config):
        nonlocal scratch
        if scratch is None:
            scratch = (weight.detach().clone(), bias.detach().clone(),
                       StepBuffers.allocate(x.shape[1], batch_size, x.device))
        w, b, buf = scratch
        launch_step(w, b, x, y, perm, buf, batch_size, 1e-6, cfg, precision)

    return _tuner.pick(key, run, configs, tracing=_is_fake(weight, x))


class FusedSGDStep:
    """Fused softmax-regression SGD training on (x, y), batches drawn through ``perm``.

    Validates once at construction and owns static buffers, so :meth:`step` launches exactly two
    kernels with no allocation and no host synchronisation: safe to capture in a CUDA graph (one step,
    or a whole epoch with :meth:`epoch`). Loss / accuracy sums stay on the device until :meth:`read_stats`.

        trainer = FusedSGDStep(model.weight, model.bias, x_gpu, y_gpu, batch_size=128, lr=0.1)
        trainer.set_perm(torch.randperm(len(x)))
        trainer.epoch()
        loss_sum, correct = trainer.read_stats()
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 batch_size: int, lr: float, *, perm: Optional[torch.Tensor] = None, precision: str = "ieee",
                 config: Optional[Config] = None) -> None:
        weight, bias = weight.data if isinstance(weight, torch.nn.Parameter) else weight, \
            bias.data if isinstance(bias, torch.nn.Parameter) else bias
        if perm is None:
            perm = torch.arange(x.shape[0] if isinstance(x, torch.Tensor) and x.ndim >= 1 else 0,
                                dtype=torch.int32, device=getattr(x, "device", None))
        validate(weight, bias, x, y, perm, batch_size, lr, precision)
        self.weight, self.bias, self.x, self.y = weight, bias, x, y
        self.perm = perm.clone()  # static buffer: set_perm copies into it
        self.batch_size, self.lr, self.precision = batch_size, float(lr), precision
        self.n_steps = triton.cdiv(x.shape[0], batch_size)
        self.buf = StepBuffers.allocate(x.shape[1], batch_size, x.device)
        self.config = config or pick_config(weight, bias, x, y, self.perm, batch_size, lr, precision)

    def set_perm(self, perm: torch.Tensor) -> None:
        """Copy a new batch order into the static permutation buffer (e.g. once per epoch)."""
        check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES)
        if perm.shape != self.perm.shape:
            raise ValueError(f"perm has shape {tuple(perm.shape)}, expected {tuple(self.perm.shape)}")
        self.perm.copy_(perm, non_blocking=True)

    def step(self) -> None:
        launch_step(self.weight, self.bias, self.x, self.y, self.perm, self.buf, self.batch_size, self.lr,
                    self.config, self.precision)

    def epoch(self) -> None:
        for _ in range(self.n_steps):
            self.step()

    def read_stats(self, reset: bool = True) -> tuple[float, int]:
        """(sum of per-example losses, number correct) since the last reset; one host sync."""
        loss, correct = float(self.buf.loss_sum.item()), int(self.buf.correct_sum.item())
        if reset:
            self.reset_stats()
        return loss, correct

    def reset_stats(self) -> None:
        self.buf.loss_sum.zero_()
        self.buf.correct_sum.zero_()


# ----------------------------------------------------------------------------------------------------
# torch op registration (so torch.compile(fullgraph=True) traces through a training step)
# ----------------------------------------------------------------------------------------------------
@torch.library.triton_op("tk::softmax_regression_sgd_step",
                         mutates_args=("weight", "bias", "step", "loss_sum", "correct_sum", "gw", "gb",
                                       "loss_part", "correct_part"))
def _sgd_step_op(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
                 step: torch.Tensor, loss_sum: torch.Tensor, correct_sum: torch.Tensor, gw: torch.Tensor,
                 gb: torch.Tensor, loss_part: torch.Tensor, correct_part: torch.Tensor, batch_size: int,
                 lr: float, precision: str) -> None:
    buf = StepBuffers(step, loss_sum, correct_sum, gw, gb, loss_part, correct_part)
    cfg = pick_config(weight, bias, x, y, perm, batch_size, lr, precision)
    launch_step(weight, bias, x, y, perm, buf, batch_size, lr, cfg, precision)


def sgd_step(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
             buf: StepBuffers, batch_size: int, lr: float, precision: str = "ieee") -> None:
    """One validated fused SGD step as a torch op (updates weight, bias and ``buf`` in place)."""
    validate(weight, bias, x, y, perm, batch_size, lr, precision)
    if buf.gw.shape[0] < triton.cdiv(batch_size, 16) or buf.gw.shape[2] != x.shape[1]:
        raise ValueError(f"buf was allocated for another shape: gw {tuple(buf.gw.shape)}")
    torch.ops.tk.softmax_regression_sgd_step(weight, bias, x, y, perm, *buf.tensors(), batch_size,
                                             float(lr), precision)
