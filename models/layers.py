"""Thin nn.Module wrappers over the Triton ops. Each subclasses its torch.nn twin, so parameters,
state_dicts and initialisation are exactly those of torch.nn and load into / from it.

Linear (fused GEMM + bias + activation), MLP, Softmax, LogSoftmax, CrossEntropyLoss (+ correct count),
LayerNorm, LayerNormReLUMaxPool (Char-CNN's fused inference block)."""
from __future__ import annotations

import warnings

import torch
from torch import nn

from triton_kernels import cross_entropy
from triton_kernels import gemm as _gemm
from triton_kernels import layernorm
from triton_kernels import softmax
from triton_kernels.runtime import check_choice


class Linear(nn.Linear):
    """y = act(x @ W^T + b) (+ residual) in one fused Triton GEMM.

    activation: "none" | "relu" | "gelu" (erf, nn.GELU()) | "gelu_tanh" (nn.GELU(approximate="tanh"));
    precision (fp32 inputs only): "ieee" | "tf32" | "tf32x3" | None, what nn.Linear would use at each call
    ("tf32" where torch allows TF32 for matmuls, e.g. after torch.set_float32_matmul_precision("high"), else
    "ieee"). Under autocast it computes in the autocast dtype, as nn.Linear does.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "none",
                 precision: str | None = None, device=None, dtype=None) -> None:
        check_choice("activation", activation, _gemm.ACTIVATIONS)
        check_choice("precision", precision, (*_gemm.PRECISIONS, None))
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation
        self.precision = precision

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return _gemm.linear(x, self.weight, self.bias, self.activation, residual, self.precision)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}, precision={self.precision}"


class MLP(nn.Sequential):
    """A stack of fused Linear layers (activation on all but the last): the compile test's model."""

    def __init__(self, sizes: list[int], activation: str = "relu", **kw) -> None:
        layers = [Linear(sizes[i], sizes[i + 1], activation=activation if i < len(sizes) - 2 else "none", **kw)
                  for i in range(len(sizes) - 1)]
        super().__init__(*layers)


# --------------------------------------------------------------------------------------------------
# Fused memory-bound ops: softmax, cross-entropy (+ accuracy), layernorm
# --------------------------------------------------------------------------------------------------


def _softmax_dim(dim: int | None, ndim: int, name: str) -> int:
    """``dim``, or for dim=None torch's legacy implicit choice (torch.nn.functional._get_softmax_dim):
    dim 0 for 0-, 1- and 3-dim inputs, else dim 1, with torch's deprecation warning."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
                  "dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(nn.Softmax):
    """softmax along ``dim`` with fp32 math in one Triton pass; dim=None picks the dim as nn.Softmax does
    (torch's legacy rule: 0 for 1-D and 3-D inputs, else 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim
        return softmax.softmax(x, dim if dim is not None else _softmax_dim(dim, x.ndim, "softmax"))


class LogSoftmax(nn.LogSoftmax):
    """log_softmax along ``dim`` with fp32 math in one Triton pass; dim=None as nn.LogSoftmax (see
    Softmax)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim
        return softmax.log_softmax(x, dim if dim is not None else _softmax_dim(dim, x.ndim, "log_softmax"))


class CrossEntropyLoss(nn.CrossEntropyLoss):
    """nn.CrossEntropyLoss (class-index targets) whose forward also writes the gradient, so the backward
    is a scale. ``return_correct=True`` makes forward return ``(loss, n_correct)``: the number of
    non-ignored rows whose argmax equals the target, a 0-dim int64 tensor on the device (no host sync)."""

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, return_correct: bool = False) -> None:
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)
        self.return_correct = return_correct

    def forward(self, input: torch.Tensor, target: torch.Tensor):
        return cross_entropy.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                           self.label_smoothing, return_correct=self.return_correct)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (any normalized_shape, e.g. [256, 1008]) in Triton, forward and backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class LayerNormReLUMaxPool(nn.LayerNorm):
    """LayerNorm([C, L]) -> ReLU -> MaxPool1d(pool, stride=pool) over x (B, C, L), as in Char-CNN.

    Its state_dict is exactly nn.LayerNorm's. Inference (no grad needed) runs one fused Triton kernel
    (after a statistics pass); when a gradient is needed it runs the Triton LayerNorm followed by
    torch's relu and max_pool1d, so it trains too.
    """

    def __init__(self, normalized_shape, pool: int = 3, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                         device=device, dtype=dtype)
        if len(self.normalized_shape) != 2:
            raise ValueError(f"normalized_shape must be [C, L], got {list(self.normalized_shape)}")
        if not isinstance(pool, int) or pool < 1:
            raise ValueError(f"pool must be a positive int, got {pool!r}")
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, self.weight, self.bias))
        if needs_grad:
            y = layernorm.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            return nn.functional.max_pool1d(torch.relu(y), self.pool, self.pool)
        return layernorm.layer_norm_relu_maxpool(x, self.weight, self.bias, self.eps, self.pool)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pool={self.pool}"
