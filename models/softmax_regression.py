"""Softmax regression: one linear layer 784 -> 10 (an nn.Linear) whose logits feed softmax cross-entropy.
Its fused Triton SGD step is triton_kernels/softmax_regression.py (FusedSGDStep); the MNIST study's ladder
of ways to train it, eager to CUDA-graphed fused kernel, is bench/mnist_ladder.py.
"""
from __future__ import annotations

import torch
from torch.nn import functional
from torch import nn

BACKENDS = ("eager", "compile", "triton")


class SoftmaxRegression(nn.Linear):
    """logits = x @ W^T + b (an nn.Linear, so state_dicts interchange with torch.nn).

    backend: "eager" | "compile" | "triton" (the forward through the Triton GEMM; training with the fused
    step goes through triton_kernels.softmax_regression.FusedSGDStep).
    """

    def __init__(self, in_features: int = 784, num_classes: int = 10, backend: str = "eager", device=None,
                 dtype=None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        super().__init__(in_features, num_classes, bias=True, device=device, dtype=dtype)
        self.backend = backend
        self._compiled = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "triton":
            from triton_kernels.gemm import linear

            return linear(x, self.weight, self.bias)
        if self.backend == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(functional.linear, dynamic=False)
            return self._compiled(x, self.weight, self.bias)
        return functional.linear(x, self.weight, self.bias)

    @torch.no_grad()
    def accuracy(self, x: torch.Tensor, y: torch.Tensor, chunk: int = 8192) -> float:
        """Fraction of rows of x classified as y (eager forward; one host sync)."""
        correct = torch.zeros((), dtype=torch.int64, device=self.weight.device)
        for i in range(0, x.shape[0], chunk):
            xb = x[i:i + chunk].to(self.weight.device, torch.float32)
            correct += (functional.linear(xb, self.weight, self.bias).argmax(1) == y[i:i + chunk].to(xb.device)).sum()
        return correct.item() / max(1, x.shape[0])
