"""Fused multi-tensor Adam (L2 regularisation as torch.optim.Adam's weight_decay) over ONE flat buffer.

Math (torch.optim.Adam, amsgrad=False, maximize=False), step t >= 1, elementwise:
    g  = grad + weight_decay * p                        (L2: the decay is added to the gradient)
    m  = beta1 * m + (1 - beta1) * g
    v  = beta2 * v + (1 - beta2) * g^2
    p  = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

Tiling: a 1-D grid of BLOCK-element chunks; each program reads p, m, v and the gradient with 16-byte
vector loads and writes p, m, v once (28 bytes per element with a reduced gradient): one pass over
memory for every parameter of a model, however many tensors it has.

The gradient can be given as ``NP`` partial rows (NP, N) (e.g. per-row-tile weight gradients of the
fused MLP backward); they are summed in the same pass (and optionally stored), so the reduction costs
no extra launch.

The step count is either a host int (bias corrections computed in float64 on the host, exactly as
torch.optim.Adam) or a device tensor (read in the kernel: what a CUDA graph replays); the caller
increments a device step counter before the launch. With the device counter the kernel computes the
bias corrections 1 - beta^t = 1 - exp(t log beta) in float64 (one scalar per program; log beta from the
host): in fp32 that difference loses the ulp of 1 against a result of order 1 - beta (1e-3 for
beta2 = 0.999: a relative error of 1e-5 in the update), and so does 1 - beta from beta rounded to fp32,
which is why 1 - beta1 and 1 - beta2 are computed on the host too.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import math

import torch
import triton
import triton.language as tl

from .runtime import cdiv, launch as _launch
from .runtime import Autotuner, Config, bucket, check_tensor, register_tuner


@triton.jit
def _adam_kernel(
    p_ptr, g_ptr, m_ptr, v_ptr, gout_ptr, step_ptr,
    N, NP, lr, beta2, one_minus_beta1, one_minus_beta2, log_beta1, log_beta2, eps, weight_decay, bc1, bc2,
    STEP_ON_DEVICE: tl.constexpr, STORE_GRAD: tl.constexpr, BLOCK: tl.constexpr,
):
    """p, m, v, gout: (N,) fp32, contiguous; g: (NP, N) fp32 gradient partials, contiguous (NP = 1: a
    plain gradient); step: (1,) fp32 device step count (STEP_ON_DEVICE); bc1, bc2: 1 - beta^t from the
    host otherwise. one_minus_beta*, log_beta*: 1 - beta and log(beta) computed in float64 on the host."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    for r in range(1, NP):
        g += tl.load(g_ptr + r * N + offs, mask=mask, other=0.0)
    if STORE_GRAD:
        tl.store(gout_ptr + offs, g, mask=mask)
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    m = tl.load(m_ptr + offs, mask=mask, other=0.0)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0)
    if STEP_ON_DEVICE:
        # 1 - beta^t in float64 (a scalar per program): no cancellation against 1 in fp32
        t = tl.load(step_ptr).to(tl.float64)
        c1 = (1.0 - tl.exp(t * tl.cast(log_beta1, tl.float64))).to(tl.float32)
        c2 = (1.0 - tl.exp(t * tl.cast(log_beta2, tl.float64))).to(tl.float32)
    else:
        c1 = bc1
        c2 = bc2
    g = g + weight_decay * p
    m = m + one_minus_beta1 * (g - m)          # torch: m.lerp_(g, 1 - beta1)
    v = beta2 * v + one_minus_beta2 * g * g
    denom = tl.sqrt(v) / tl.sqrt(c2) + eps
    p = p - (lr / c1) * (m / denom)
    tl.store(p_ptr + offs, p, mask=mask)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)


CONFIGS = [Config({"BLOCK": b}, w, 1) for b, w in ((1024, 4), (2048, 4), (4096, 8), (8192, 8))]
INTERPRET_CONFIG = Config({"BLOCK": 1024}, 4, 1)
class AdamKey(NamedTuple):
    """What a tuned fused-Adam config depends on."""
    n: int                # elements, bucketed
    several_params: bool  # a flat multi-tensor launch
    step_on_device: bool  # the step counter is read from the device


_tuner = register_tuner(Autotuner("adam", _adam_kernel, CONFIGS, interpret_config=INTERPRET_CONFIG))


def adam_step(params: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
              step: Union[int, torch.Tensor], *, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, grad_out: Optional[torch.Tensor] = None,
              config: Optional[Config] = None) -> Config:
    """One Adam update of the flat ``params`` in place (and of the moments).

    grad: (N,) or (NP, N) partials summed in the kernel; step: the step number AFTER incrementing
    (1 on the first update), an int or a (1,) float32 device tensor; grad_out: optional (N,) buffer that
    receives the summed gradient. Returns the launch config (reuse it to skip the tuner lookup).
    """
    check_tensor("params", params, ndim=1, dtypes=(torch.float32,))
    dev = params.device
    check_tensor("grad", grad, ndim=(1, 2), dtypes=(torch.float32,), device=dev)
    check_tensor("exp_avg", exp_avg, ndim=1, dtypes=(torch.float32,), device=dev)
    check_tensor("exp_avg_sq", exp_avg_sq, ndim=1, dtypes=(torch.float32,), device=dev)
    N = params.numel()
    for name, t in (("params", params), ("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (one flat buffer)")
    if grad.shape[-1] != N:
        raise ValueError(f"grad has {grad.shape[-1]} elements per row but params has {N}")
    if grad.ndim == 2 and grad.shape[0] == 0:
        raise ValueError("grad (NP, N) must hold at least one row of partials, got NP = 0")
    if exp_avg.numel() != N or exp_avg_sq.numel() != N:
        raise ValueError(f"exp_avg / exp_avg_sq must have {N} elements like params")
    if grad_out is not None:
        check_tensor("grad_out", grad_out, ndim=1, dtypes=(torch.float32,), device=dev)
        if grad_out.numel() != N:
            raise ValueError(f"grad_out must have {N} elements")
        if not grad_out.is_contiguous():
            raise ValueError("grad_out must be contiguous (one flat buffer)")
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"betas must be in [0, 1), got {betas}")
    if not (lr >= 0 and eps >= 0 and weight_decay >= 0):  # NaN fails too
        raise ValueError(f"lr, eps and weight_decay must be >= 0 (got {lr}, {eps}, {weight_decay})")
    on_device = isinstance(step, torch.Tensor)
    if on_device:
        check_tensor("step", step, dtypes=(torch.float32,), device=dev)
        if step.numel() != 1:
            raise ValueError(f"step must hold one element (the step count), got shape {tuple(step.shape)}")
        bc1 = bc2 = 1.0
    else:
        if int(step) < 1:
            raise ValueError(f"step must be >= 1 (the step number after incrementing), got {step}")
        bc1, bc2 = 1.0 - betas[0] ** int(step), 1.0 - betas[1] ** int(step)
    NP = grad.shape[0] if grad.ndim == 2 else 1
    log_beta1, log_beta2 = (math.log(b) if b > 0 else -math.inf for b in betas)
    if N == 0:
        return config or INTERPRET_CONFIG
    args = (params, grad, exp_avg, exp_avg_sq, grad_out if grad_out is not None else params,
            step if on_device else params, N, NP, float(lr), float(betas[1]), 1.0 - betas[0], 1.0 - betas[1],
            log_beta1, log_beta2, float(eps), float(weight_decay), bc1, bc2)

    def run(cfg, a=args):
        _launch(_adam_kernel, (cdiv(N, cfg.kwargs["BLOCK"]),), *a, STEP_ON_DEVICE=on_device,
                STORE_GRAD=grad_out is not None, **cfg.kwargs, num_warps=cfg.num_warps, num_stages=1)

    if config is None:
        # tune on scratch copies: every trial launch updates the buffers in place
        def trial(cfg):
            scratch = (params.clone(), grad, exp_avg.clone(), exp_avg_sq.clone())
            run(cfg, scratch + args[4:])

        config = _tuner.pick(AdamKey(n=bucket(N, 1024), several_params=NP > 1, step_on_device=on_device), trial)
    run(config)
    return config


class FlatAdam:
    """Adam over one flat parameter buffer (state: exp_avg, exp_avg_sq, a device step counter), one
    launch per step (plus the counter increment). Matches torch.optim.Adam's update."""

    def __init__(self, params: torch.Tensor, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        check_tensor("params", params, ndim=1, dtypes=(torch.float32,))
        self.params = params
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.exp_avg = torch.zeros_like(params)
        self.exp_avg_sq = torch.zeros_like(params)
        self.step_t = torch.zeros(1, device=params.device, dtype=torch.float32)
        self.config: Optional[Config] = None

    def step(self, grad: torch.Tensor, grad_out: Optional[torch.Tensor] = None) -> None:
        self.step_t += 1
        self.config = adam_step(self.params, grad, self.exp_avg, self.exp_avg_sq, self.step_t, lr=self.lr,
                                betas=self.betas, eps=self.eps, weight_decay=self.weight_decay,
                                grad_out=grad_out, config=self.config)

    def state_dict(self) -> dict:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_t,
                "lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay}

    def load_state_dict(self, sd: dict) -> None:
        self.exp_avg.copy_(sd["exp_avg"])
        self.exp_avg_sq.copy_(sd["exp_avg_sq"])
        self.step_t.copy_(sd["step"])
        self.lr, self.betas, self.eps, self.weight_decay = sd["lr"], tuple(sd["betas"]), sd["eps"], sd["weight_decay"]
