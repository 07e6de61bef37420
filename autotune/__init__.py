"""Autotune sweeps: time every config of a kernel's space on given shapes and record every trial."""
from triton_kernels import runtime as _runtime  # noqa: F401  (interpreter switch before triton)
