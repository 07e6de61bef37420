"""Case builders for the op suite, one module per op family: each exports
cases(quick, dtypes, shapes, tiny) -> list[Case].

quick:  the acceptance sizes only (GPU);
tiny:   interpreter sizes (default: in the CPU interpreter); --full turns it off there;
shapes: build exactly these shapes, where the family takes shapes of that rank (GEMM: MxNxK, or N for
        N^3; softmax, cross-entropy, LayerNorm: MxN), in ``dtypes`` (default float32 in the CPU
        interpreter, bfloat16 on a GPU);
dtypes: without shapes, keep only the cases of these dtypes.
"""
from __future__ import annotations

import torch


def is_tiny(tiny: bool | None) -> bool:
    """``tiny`` as given, else whether kernels run in the CPU interpreter."""
    from triton_kernels.runtime import INTERPRET

    return INTERPRET if tiny is None else bool(tiny)


def shape_dtypes(dtypes) -> list[torch.dtype]:
    """The dtypes to build requested shapes in: those asked for, else float32 in the CPU interpreter
    (it has no bfloat16 dot) and bfloat16 on a GPU."""
    from triton_kernels.runtime import INTERPRET

    return list(dtypes) if dtypes else [torch.float32 if INTERPRET else torch.bfloat16]


def of_rank(shapes, *ranks: int) -> list[tuple[int, ...]]:
    """The requested shapes with one of these ranks (a family skips the others)."""
    return [tuple(s) for s in shapes or () if len(s) in ranks]


def keep_dtypes(cases, dtypes) -> list:
    return [c for c in cases if dtypes is None or c.dtype in dtypes]
