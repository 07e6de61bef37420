"""The view/stride matrix: every tensor argument of an op in every memory layout a caller can hand it.

A test names an op's arguments once (shape, which dims broadcast, whether it is differentiable) and the
matrix is generated: for each argument in turn, each layout below while the other arguments stay
contiguous. Every layout is a *view of a leaf base tensor*, so the float64 reference applies the same view
to the base in float64 and the gradient is compared on the base (an expanded bias's gradient is then the
sum over the broadcast rows, exactly what autograd gives torch).

Layouts (those that do not apply to a shape are skipped):
    contiguous     the plain tensor
    transposed     the last two dims swapped in memory (a .t() / .transpose(-1, -2) view), >= 2-D
    col_slice16    the first n columns of a tensor n+16 wide: row stride a multiple of 16 when n is
    col_slice_odd  the first n columns of a tensor n+7 wide: a row stride that is never 16-aligned
    row_strided    every other row of a tensor twice as tall (dim -2, or dim 0 of a 1-D tensor: stride 2)
    offset1        the same shape one element into a larger buffer: the base address is misaligned
    expanded       stride 0 along a broadcastable dim (``broadcast`` names which dims may be)

Use::

    ARGS = {"a": Arg((9, 13)), "b": Arg((13, 7)), "bias": Arg((7,), broadcast=(0,))}
    @pytest.mark.parametrize("case", view_cases(ARGS), ids=str)
    def test_views(case):
        check_case(case, lambda a, b, bias: G.gemm(a, b, bias), lambda a, b, bias: a @ b + bias,
                   dtype=torch.float32, device=DEVICE)
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import torch

from triton_kernels.testing import assert_close

LAYOUTS = ("contiguous", "transposed", "col_slice16", "col_slice_odd", "row_strided", "offset1", "expanded")


@dataclasses.dataclass(frozen=True)
class Arg:
    """One tensor argument: its shape, the dims that may be stride 0, whether it gets a gradient, and
    how its values are drawn ("randn", or "index:<n>" for integer indices below n)."""

    shape: tuple[int, ...]
    broadcast: tuple[int, ...] = ()
    grad: bool = True
    values: str = "randn"


@dataclasses.dataclass(frozen=True)
class ViewCase:
    arg: str      # the argument laid out differently ("" for the all-contiguous case)
    layout: str

    def __str__(self) -> str:
        return f"{self.arg}-{self.layout}" if self.arg else "all-contiguous"


def applies(shape: Sequence[int], layout: str, broadcast: Sequence[int] = ()) -> bool:
    nd = len(shape)
    if layout == "transposed":
        return nd >= 2
    if layout in ("col_slice16", "col_slice_odd"):
        return nd >= 2
    if layout == "expanded":
        return bool(broadcast)
    return True


def view_cases(args: Mapping[str, Arg], layouts: Sequence[str] = LAYOUTS) -> list[ViewCase]:
    """Every (argument, layout) pair that applies, plus one all-contiguous case."""
    out = [ViewCase("", "contiguous")]
    for name, arg in args.items():
        for layout in layouts:
            if layout != "contiguous" and applies(arg.shape, layout, arg.broadcast):
                out.append(ViewCase(name, layout))
    return out


def _draw(shape, arg: Arg, dtype, device, generator):
    if arg.values.startswith("index:"):
        high = int(arg.values.split(":")[1])
        return torch.randint(0, high, shape, generator=generator).to(device)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(device=device, dtype=dtype)


def make_base_and_view(arg: Arg, layout: str, dtype, device, generator=None):
    """(base, view_fn): a leaf tensor and the function that makes the argument's view of it."""
    shape = tuple(arg.shape)
    nd = len(shape)
    if layout == "contiguous":
        return _draw(shape, arg, dtype, device, generator), lambda t: t
    if layout == "transposed":
        base_shape = shape[:-2] + (shape[-1], shape[-2])
        return _draw(base_shape, arg, dtype, device, generator), lambda t: t.transpose(-1, -2)
    if layout in ("col_slice16", "col_slice_odd"):
        extra = 16 if layout == "col_slice16" else 7
        n = shape[-1]
        return _draw(shape[:-1] + (n + extra,), arg, dtype, device, generator), lambda t: t[..., :n]
    if layout == "row_strided":
        d = nd - 2 if nd >= 2 else 0
        base_shape = shape[:d] + (2 * shape[d],) + shape[d + 1:]
        index = (slice(None),) * d + (slice(None, None, 2),)
        return _draw(base_shape, arg, dtype, device, generator), lambda t: t[index]
    if layout == "offset1":
        numel = 1
        for s in shape:
            numel *= s
        return (_draw((numel + 1,), arg, dtype, device, generator),
                lambda t: t[1:].view(shape))
    if layout == "expanded":
        base_shape = tuple(1 if i in arg.broadcast else s for i, s in enumerate(shape))
        return _draw(base_shape, arg, dtype, device, generator), lambda t: t.expand(shape)
    raise ValueError(f"unknown layout {layout!r}")


def build(case: ViewCase, args: Mapping[str, Arg], dtype, device, generator=None):
    """{name: (base leaf, view_fn)} for one case; float bases that take gradients require grad."""
    out = {}
    for name, arg in args.items():
        layout = case.layout if name == case.arg else "contiguous"
        base, view = make_base_and_view(arg, layout, dtype, device, generator)
        if arg.grad and base.is_floating_point():
            base.requires_grad_()
        out[name] = (base, view)
    return out


def check_case(case: ViewCase, args: Mapping[str, Arg], fn: Callable, ref: Callable, *, dtype, device,
               tf32: bool = False, scale: float = 1.0, generator=None) -> None:
    """Run ``fn`` on the views and ``ref`` on float64 copies of the same views (on the CPU); compare
    the output and, for every argument with ``grad``, the gradient of its base. Outputs may be a tensor
    or a tuple of tensors (every floating one is compared; the first gets the upstream gradient)."""
    built = build(case, args, dtype, device, generator)
    views = {name: view(base) for name, (base, view) in built.items()}
    bases64 = {}
    for name, (base, view) in built.items():
        b64 = base.detach().cpu()
        b64 = b64.double() if b64.is_floating_point() else b64
        if base.requires_grad:
            b64.requires_grad_()
        bases64[name] = b64
    views64 = {name: built[name][1](b) for name, b in bases64.items()}
    out = fn(**views)
    out_ref = ref(**views64)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = out_ref if isinstance(out_ref, (tuple, list)) else (out_ref,)
    for i, (o, r) in enumerate(zip(outs, refs)):
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            assert_close(o, r, dtype, tf32=tf32, scale=scale, name=f"{case}: output {i}")
    if not any(base.requires_grad for base, _ in built.values()):
        return
    grad = torch.randn(outs[0].shape, generator=generator, dtype=torch.float64).to(outs[0].dtype)
    outs[0].backward(grad.to(outs[0].device))
    refs[0].backward(grad.double())
    for name, (base, _) in built.items():
        if base.requires_grad:
            assert base.grad is not None, f"{case}: no gradient reached {name}"
            assert_close(base.grad, bases64[name].grad, dtype, tf32=tf32, scale=scale,
                         name=f"{case}: d{name}")
