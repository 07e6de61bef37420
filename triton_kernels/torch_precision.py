"""The precision and dtypes torch's own matmul and convolution would run a call at, which the GEMM and conv ops
follow when their ``precision`` is None: torch's TF32 settings (cuBLAS's for matmuls, cuDNN's for convolutions)
and autocast's casts. Re-exported by runtime.py."""
from __future__ import annotations

from typing import Any

import torch

# the reader behind torch.backends.cuda.matmul.allow_tf32 (the attribute costs ~0.6 us a read, this ~0.06)
_cublas_allows_tf32 = (getattr(torch._C, "_get_cublas_allow_tf32", None)
                       or (lambda: torch.backends.cuda.matmul.allow_tf32))


def torch_matmul_precision(t: Any) -> str:
    """The precision torch's own matmul runs a GEMM of ``t``'s dtype at (a GEMM's precision=None): for fp32,
    "tf32" where torch lets cuBLAS use TF32 (torch.set_float32_matmul_precision("high" or "medium"),
    torch.backends.cuda.matmul.allow_tf32 = True or .fp32_precision = "tf32"), else "ieee", torch's default;
    16-bit inputs always run "ieee" (tensor cores). Read on every call, as torch reads it."""
    return "tf32" if getattr(t, "dtype", None) == torch.float32 and _cublas_allows_tf32() else "ieee"


# the reader behind torch.backends.cudnn.conv.fp32_precision (torch >= 2.9: "tf32", "ieee" or "none", which
# torch.backends.cudnn.allow_tf32 = False also sets), else the one behind torch.backends.cudnn.allow_tf32
_fp32_precision_of = getattr(torch._C, "_get_fp32_precision_getter", None)


def _cudnn_conv_allows_tf32() -> bool:
    if _fp32_precision_of is not None:
        return _fp32_precision_of("cuda", "conv") == "tf32"
    return torch._C._get_cudnn_allow_tf32()


def torch_conv_precision(t: Any) -> str:
    """The precision torch's own (cuDNN) convolution runs a convolution of ``t``'s dtype at (a conv's
    precision=None): for fp32, "tf32" where torch lets cuDNN use TF32 for convolutions (torch's default;
    torch.backends.cudnn.allow_tf32 = True or .conv.fp32_precision = "tf32"), else "ieee"; 16-bit inputs
    always run "ieee" (tensor cores). Read on every call, as torch reads it. While torch.compile traces, read
    through torch.backends.cudnn.allow_tf32, which dynamo guards (a compiled call is traced again when the
    setting changes: the traced kernels hold their precision) and which raises where conv's and RNN's TF32
    settings were set apart through the newer API."""
    if getattr(t, "dtype", None) != torch.float32:
        return "ieee"
    if torch.compiler.is_compiling():
        return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    return "tf32" if _cudnn_conv_allows_tf32() else "ieee"


_AUTOCAST_CASTS = frozenset((torch.float32, torch.float16, torch.bfloat16))  # what autocast casts (not float64)


def torch_matmul_operands(precision: str | None, a: Any, b: Any, bias: Any = None) -> tuple:
    """(precision, a, b, bias) as torch's own matmul / linear would run them: under autocast on a's device, the
    floating operands but float64 cast to the autocast dtype, as autocast casts linear's (their gradients come
    back through the casts, in the operands' own dtypes; the bias too, so its rounding and the activation's
    kink are torch's); ``precision``, or for None the torch_matmul_precision of the (cast) first operand.
    Anything else passes through (validation names it)."""
    if torch._C._is_any_autocast_enabled() and isinstance(a, torch.Tensor):
        device = a.device.type
        try:
            dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        except RuntimeError:  # a device autocast does not know (meta)
            dtype = None
        if dtype is not None:
            a, b, bias = _autocast_cast(a, dtype), _autocast_cast(b, dtype), _autocast_cast(bias, dtype)
    return (torch_matmul_precision(a) if precision is None else precision), a, b, bias


def _autocast_cast(t: Any, dtype: torch.dtype) -> Any:
    """``t`` in ``dtype`` where autocast would cast it (a floating tensor but float64), else ``t``."""
    if isinstance(t, torch.Tensor) and t.dtype is not dtype and t.dtype in _AUTOCAST_CASTS:
        return t.to(dtype=dtype)
    return t
