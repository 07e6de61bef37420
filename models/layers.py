"""Thin nn.Module wrappers over the Triton ops. Each subclasses its torch.nn twin, so parameters,
state_dicts and initialisation are exactly those of torch.nn and load into / from it."""
from __future__ import annotations

import torch
from torch import nn

from triton_kernels import gemm as _gemm


class Linear(nn.Linear):
    """y = act(x @ W^T + b) (+ residual) in one fused Triton GEMM.

    activation: "none" | "relu" | "gelu"; precision (fp32 inputs only): "ieee" | "tf32".
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "none",
                 precision: str = "ieee", device=None, dtype=None) -> None:
        if activation not in _gemm.ACTIVATIONS:
            raise ValueError(f"activation must be one of {_gemm.ACTIVATIONS}, got {activation!r}")
        if precision not in _gemm.PRECISIONS:
            raise ValueError(f"precision must be one of {_gemm.PRECISIONS}, got {precision!r}")
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
