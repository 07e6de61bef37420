"""Autotuned Triton kernels, one op family per module (gemm, ...). Importing this package first
switches Triton to its CPU interpreter when no CUDA device is present (see runtime.py)."""
from . import runtime  # noqa: F401  (must come before any triton import)
from .runtime import default_device, is_interpreter  # noqa: F401
