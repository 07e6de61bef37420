"""The mixed-precision weight casts of a network in one launch: Triton vs eager torch (and torch.compile, added
by the harness), on ResNet-18's and ResNet-34's convolution weights (those cuDNN runs; channels_last fp32).

cast_weights: every weight cast fp32 -> bf16 (autocast casts them one launch per layer, forward, and casts their
              gradients back one launch per layer, backward; the cast back is the same kernel, bf16 -> fp32)
              bytes = read 4 + write 2 per value     flops = 0
"""
from __future__ import annotations

import torch

from triton_kernels import foreach_cast
from triton_kernels.runtime import dtype_name

from ..harness import Case


def conv_weight_shapes(layers: tuple) -> list[tuple]:
    """The (C_out, C_in, 3 or 1, 3 or 1) weights of a CIFAR ResNet's convolutions after the stem."""
    shapes, inplanes = [], 64
    for i, (blocks, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
        for b in range(blocks):
            shapes += [(planes, inplanes, 3, 3), (planes, planes, 3, 3)]
            if b == 0 and i > 0:
                shapes.append((planes, inplanes, 1, 1))
            inplanes = planes
    return shapes


def cast_case(model: str, shapes: list[tuple], src: torch.dtype, dst: torch.dtype) -> Case:
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        ws = [torch.randn(s, device=device, generator=g).to(src) for s in shapes]
        return tuple(w.contiguous(memory_format=torch.channels_last) if w.ndim == 4 else w for w in ws)

    def eager(*ws):
        return tuple(w.to(dst) for w in ws)

    def triton(*ws):
        return tuple(foreach_cast.foreach_cast(ws, dst))

    def reference(*ws):  # a cast is exact in float64 only up to its rounding: the reference is the rounding
        return tuple(w.to(dst).double() for w in ws)

    values = sum(torch.Size(s).numel() for s in shapes)
    src_bytes, dst_bytes = (torch.tensor([], dtype=t).element_size() for t in (src, dst))
    return Case(suite="ops", name="cast_weights", params={"model": model, "tensors": len(shapes), "values": values,
                                                          "to": dtype_name(dst)},
                dtype=src, inputs=inputs, fns={"eager": eager, "triton": triton}, reference=reference,
                bytes=float(values * (src_bytes + dst_bytes)), tol=0.0)


def cases(quick: bool = False, dtypes=None, **_) -> list[Case]:
    from triton_kernels.runtime import INTERPRET

    if INTERPRET:  # no bf16 rounding in the interpreter: fp16
        out = [cast_case("tiny", [(4, 3, 3, 3), (8, 4, 3, 3), (8, 4, 1, 1), (5,)], torch.float32, torch.float16)]
    else:
        r18 = conv_weight_shapes((2, 2, 2, 2))
        out = [cast_case("resnet18", r18, torch.float32, torch.bfloat16),
               cast_case("resnet18", r18, torch.bfloat16, torch.float32)]
        if not quick:
            out.append(cast_case("resnet34", conv_weight_shapes((3, 4, 6, 3)), torch.float32, torch.bfloat16))
    return [c for c in out if dtypes is None or c.dtype in dtypes]
