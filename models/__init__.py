"""nn.Modules built on the playground's Triton kernels (each subclasses its torch.nn twin)."""
from triton_kernels import runtime as _runtime  # noqa: F401  (interpreter switch before triton)
