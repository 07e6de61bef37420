"""The shared benchmark harness (harness.py) and one module per study (python -m bench.<study>)."""
from triton_kernels import runtime as _runtime  # noqa: F401  (interpreter switch before triton)
