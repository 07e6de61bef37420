"""TMA (the tensor-memory accelerator, Hopper) helpers of the kernels that read through it: which tensors a
descriptor can read, the host-side descriptor of a 2-D operand, whether a device runs TMA kernels, and the
scratch allocator of kernels that build their descriptors on the device."""
from __future__ import annotations

import contextvars

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from .runtime import INTERPRET


def tma_layout(t: torch.Tensor):
    """(transposed, row stride) when a 2-D tensor can be read through a TMA descriptor, else None.

    TMA needs one unit stride, the other stride and the base address 16-byte aligned: a stride-0
    (expanded) tensor or a view whose base is not 16-byte aligned (offset into its storage) is refused."""
    es = t.element_size()
    if t.stride(1) == 1 and t.shape[1] > 1:
        trans, stride = False, t.stride(0)
    elif t.stride(0) == 1 and t.shape[0] > 1:
        trans, stride = True, t.stride(1)
    else:
        return None
    if (stride * es) % 16 or t.data_ptr() % 16 or stride < 1:
        return None
    return trans, stride


_CUDA = torch.device("cuda")
_ALLOCATOR_SET = contextvars.ContextVar("gemm_tma_allocator_set", default=False)


def _tma_scratch(size: int, alignment: int, stream):
    """Scratch memory for tensor descriptors built on the device (the Gluon tf32 GEMM, conv2d's transposed
    kernel), on the current device and torch's current stream (the stream Triton launches on)."""
    return torch.empty(size, device=_CUDA, dtype=torch.int8)


def _ensure_allocator() -> None:
    """Device-side TMA descriptors need scratch memory from an allocator Triton calls at launch. Triton
    keeps the allocator in a context variable, which a new thread does not inherit (autograd runs the
    backward of CUDA tensors in a thread of its own), so it is set once per context that launches such a
    kernel (a flag in a context variable of our own says whether this context has it)."""
    if not _ALLOCATOR_SET.get():
        triton.set_allocator(_tma_scratch)
        _ALLOCATOR_SET.set(True)


_INTERPRETER_SMS = 4  # the stand-in machine the interpreter sizes the persistent TMA kernel's grid for
_TMA_DEVICES: dict[int, bool] = {}  # device index -> runs the TMA kernel (asked once per device)


def _tma_device(t: torch.Tensor) -> bool:
    """Whether t's device runs the TMA kernel: a CUDA device of compute capability 9 or more, never the
    interpreter."""
    index = t.get_device()
    capable = _TMA_DEVICES.get(index)
    if capable is None:
        capable = _TMA_DEVICES[index] = (not INTERPRET and t.device.type == "cuda"
                                         and torch.cuda.get_device_capability(t.device)[0] >= 9)
    return capable


def _tma_eligible(a, b, M, N, K, on_tma_device: bool | None = None) -> bool:
    """Whether the persistent TMA GEMM kernel can run C (M, N) = A @ B (K deep): not too small, on a device
    that runs it (``on_tma_device``; default: asked of a's), both operands TMA-readable."""
    return (M >= 64 and N >= 64 and K >= 32 and (_tma_device(a) if on_tma_device is None else on_tma_device)
            and tma_layout(a) is not None and tma_layout(b) is not None)


def tma_descriptor(t: torch.Tensor, transposed: bool, block: list) -> TensorDescriptor:
    """The host-side TMA descriptor of a 2-D ``t`` read in tiles of ``block`` (rows, columns of t), over t as
    stored: row-major, or with ``transposed`` its row-major transpose (t stored column-major; tiles of the
    block reversed)."""
    if transposed:
        t, block = t.t(), block[::-1]
    return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], list(block))
