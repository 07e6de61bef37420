"""Correctness helpers shared by the tests and the benchmark harness.

One tolerance table for the whole project (relative error ||out - ref|| / ||ref|| against a float64
reference). The interpreter computes tl.dot exactly in fp32, so "tf32" applies only on the GPU.
"""
from __future__ import annotations

import contextlib

import torch

# key: the precision the computation ran in
TOLERANCE: dict[str, float] = {
    "float64": 1e-10,
    "float32": 1e-5,   # ieee fp32
    "tf32": 1e-3,      # tf32 tensor cores, or interpreter-vs-GPU dot
    "float16": 5e-3,
    "bfloat16": 2e-2,
}


def tolerance(dtype: torch.dtype | str, tf32: bool = False) -> float:
    """Relative-error tolerance for results computed from inputs of ``dtype``."""
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name == "float32" and tf32:
        name = "tf32"
    return TOLERANCE[name]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN anywhere gives inf, so it never passes)."""
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    if out64.shape != ref64.shape:
        raise ValueError(f"shape mismatch: out {tuple(out64.shape)} vs ref {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all() and torch.isfinite(ref64).all():
        return float("inf")
    den = ref64.norm().item()
    num = (out64 - ref64).norm().item()
    if den == 0.0:
        return num
    return num / den


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype | str, *, tf32: bool = False,
                 name: str = "output", scale: float = 1.0) -> float:
    """Fail unless rel_err(out, ref) <= scale * tolerance(dtype)."""
    err = rel_err(out, ref)
    tol = scale * tolerance(dtype, tf32)
    assert err <= tol, f"{name}: relative error {err:.3e} > tolerance {tol:.1e} ({dtype})"
    return err


@contextlib.contextmanager
def cudnn_tf32(allow: bool):
    """torch.backends.cudnn.allow_tf32 = allow for the block (cuDNN's convolutions, and ours at precision=None),
    then as it was."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def assert_fast_path_repeats(call, leaves: list, grad: torch.Tensor, names: tuple) -> None:
    """Run ``call()`` (an op on ``leaves``) and its backward of ``grad`` three times: the first call takes the
    general path, the others an eager fast path's autograd node (named ``_Node``; the third through what the
    second prepared); outputs and the gradients of ``leaves`` (``names``) agree bit for bit."""
    outs = []
    for _ in range(3):
        y = call()
        y.backward(grad)
        outs.append((y.detach(), y.grad_fn, [t.grad.clone() for t in leaves]))
        for t in leaves:
            t.grad = None
    assert type(outs[0][1]).__name__ != "_NodeBackward"
    for out in outs[1:]:
        assert type(out[1]).__name__ == "_NodeBackward"
        assert torch.equal(outs[0][0], out[0])
        for name, g0, g1 in zip(names, outs[0][2], out[2]):
            assert torch.equal(g0, g1), name


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill an output buffer with NaN (or -1 for integers) so unwritten elements show up."""
    if t.is_floating_point():
        return t.fill_(float("nan"))
    return t.fill_(-1)


def second_derivatives(fn, inputs: list, out_weight: torch.Tensor, directions: list) -> tuple:
    """(gradients, second derivatives) of ``fn`` at ``inputs`` (tensors requiring a gradient): with
    L = sum(out_weight * fn(*inputs)^2) -- so the incoming gradient depends on the inputs too -- the
    gradients g = dL/d inputs are taken with create_graph=True, then the second derivatives are the
    gradients of sum_i <g_i, directions_i> with respect to every input (zeros where one is not reached).
    The sums are taken in float64 (``out_weight`` and ``directions`` are float64)."""
    y = fn(*inputs)
    loss = (out_weight * y.double() ** 2).sum()
    grads = torch.autograd.grad(loss, inputs, create_graph=True)
    total = sum((g.double() * d).sum() for g, d in zip(grads, directions))
    return grads, torch.autograd.grad(total, inputs, allow_unused=True, materialize_grads=True)


def assert_within_two_roundings(z, a, b, bias, name="Z"):
    """Z = A @ B + bias as the fp64-accumulating kernel makes it: each product exact, the sums fp64's (off by at most
    K 2^-53 sum |a b|), rounded to fp32 (half an ulp of the product), then + bias, rounded again (half an ulp of Z).
    fp32 FMA over K terms may be off by ~K ulps; this bound is what sets the two apart."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    product = a64 @ b64
    z_ref = product + bias.detach().double().cpu()
    eps = torch.finfo(torch.float32).eps
    bound = 0.5 * eps * (product.abs() + z_ref.abs()) + a.shape[1] * 2.0 ** -53 * (a64.abs() @ b64.abs())
    err = (z.detach().double().cpu() - z_ref).abs()
    assert bool((err <= bound).all()), (f"{name}: {int((err > bound).sum())} entries beyond two fp32 roundings, "
                                        f"worst {float((err / bound).max()):.2f}x the bound")
