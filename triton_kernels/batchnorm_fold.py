"""BatchNorm folded into a convolution for inference (the batch norm family's weight transform; no kernel)."""
from __future__ import annotations

from typing import Optional

import torch

from .runtime import check_tensor

DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # the batch norm family's activation dtypes


def fold_into_conv(conv_weight: torch.Tensor, conv_bias: Optional[torch.Tensor], running_mean: torch.Tensor,
                   running_var: torch.Tensor, weight: Optional[torch.Tensor] = None,
                   bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference: (w', b') such that conv2d(x, w', b') == batch_norm(conv2d(x, w, b)) with the running
    statistics: w' = w * s (per output channel), b' = (b - mean) * s + beta, s = weight / sqrt(var + eps).
    Computed in float64, returned in the conv weight's dtype."""
    check_tensor("conv_weight", conv_weight, ndim=4, dtypes=DTYPES + (torch.float64,))
    out_channels = conv_weight.shape[0]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias), ("conv_bias", conv_bias)):
        if t is not None and tuple(t.shape) != (out_channels,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({out_channels},) "
                             "(the conv's output channels)")
    with torch.no_grad():
        scale = torch.rsqrt(running_var.double() + eps)
        if weight is not None:
            scale = scale * weight.double()
        b = conv_bias.double() if conv_bias is not None else torch.zeros_like(scale)
        beta = bias.double() if bias is not None else torch.zeros_like(scale)
        folded_w = conv_weight.double() * scale[:, None, None, None]
        folded_b = (b - running_mean.double()) * scale + beta
    return folded_w.to(conv_weight.dtype), folded_b.to(conv_weight.dtype)
