"""Cross-entropy cases: Triton (loss + gradient + correct count in one pass) vs eager
functional.cross_entropy + autograd (and torch.compile, added by the harness).

cross_entropy_fwd:     loss only                 bytes = read logits (+ targets)
cross_entropy_fwdbwd:  loss and d loss / d logits bytes = read logits + write the gradient (+ targets)
"""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels import cross_entropy

from ..harness import Case


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def ce_case(M: int, V: int, dtype: torch.dtype, backward: bool = True, label_smoothing: float = 0.0,
            ignore_frac: float = 0.0) -> Case:
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn(M, V, device=device, generator=g) * 2).to(dtype)
        t = torch.randint(0, V, (M,), device=device, generator=g)
        if ignore_frac:
            t[torch.rand(M, device=device, generator=g) < ignore_frac] = -100
        return (x.requires_grad_(backward), t)

    def eager(x, t):
        loss = functional.cross_entropy(x, t, label_smoothing=label_smoothing)
        return (loss, torch.autograd.grad(loss, x)[0]) if backward else loss

    def ours(x, t):
        loss = cross_entropy.cross_entropy(x, t, label_smoothing=label_smoothing, check_target=False)
        return (loss, torch.autograd.grad(loss, x)[0]) if backward else loss

    def reference(x, t):
        x64 = x.detach().double().requires_grad_(backward)
        with torch.enable_grad():
            loss = functional.cross_entropy(x64, t, label_smoothing=label_smoothing)
            if not backward:
                return loss.detach()
            return loss.detach(), torch.autograd.grad(loss, x64)[0]

    n = M * V
    params = {"M": M, "V": V}
    if label_smoothing:
        params["label_smoothing"] = label_smoothing
    if ignore_frac:
        params["ignore_frac"] = ignore_frac
    return Case(suite="ops", name="cross_entropy_" + ("fwdbwd" if backward else "fwd"), params=params,
                dtype=dtype, inputs=inputs, fns={"eager": eager, "triton": ours}, reference=reference,
                flops=float((8 if backward else 4) * n),
                bytes=float((2 if backward else 1) * n * _es(dtype) + 8 * M),
                backward=backward, graph_ok=not backward)


def accuracy_case(M: int, V: int, dtype: torch.dtype) -> Case:
    """The MNIST training-step epilogue: loss, gradient and the correct count (eager needs an argmax pass)."""
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(M, V, device=device, generator=g).to(dtype).requires_grad_(),
                torch.randint(0, V, (M,), device=device, generator=g))

    def eager(x, t):
        loss = functional.cross_entropy(x, t)
        return loss, torch.autograd.grad(loss, x)[0], (x.detach().argmax(1) == t).sum()

    def ours(x, t):
        loss, correct = cross_entropy.cross_entropy(x, t, return_correct=True, check_target=False)
        return loss, torch.autograd.grad(loss, x)[0], correct

    def reference(x, t):
        x64 = x.detach().double().requires_grad_()
        with torch.enable_grad():
            loss = functional.cross_entropy(x64, t)
            return loss.detach(), torch.autograd.grad(loss, x64)[0], (x64.detach().argmax(1) == t).sum().double()

    return Case(suite="ops", name="cross_entropy_acc_fwdbwd", params={"M": M, "V": V}, dtype=dtype,
                inputs=inputs, fns={"eager": eager, "triton": ours}, reference=reference,
                flops=float(9 * M * V), bytes=float(2 * M * V * _es(dtype) + 8 * M), backward=True,
                graph_ok=False)


def cases(quick: bool = False, dtypes=None, shapes=None, tiny=None) -> list[Case]:
    from . import is_tiny, of_rank, shape_dtypes

    keep = (lambda dt: dtypes is None or dt in dtypes)
    f32, bf16 = torch.float32, torch.bfloat16
    if shapes:  # exactly these MxV shapes: loss and gradient
        return [ce_case(M, V, dt) for M, V in of_rank(shapes, 2) for dt in shape_dtypes(dtypes)]
    if is_tiny(tiny):
        out = [ce_case(33, 100, f32), ce_case(9, 3000, f32, label_smoothing=0.1, ignore_frac=0.2),
               ce_case(17, 10, f32, backward=False), accuracy_case(64, 10, f32)]
        return [c for c in out if keep(c.dtype)]
    out = [ce_case(8192, 32000, f32), ce_case(8192, 32000, bf16)]  # acceptance sizes
    if not quick:
        out += [ce_case(8192, 32000, f32, backward=False), ce_case(8192, 32000, bf16, backward=False),
                ce_case(8192, 32000, bf16, label_smoothing=0.1, ignore_frac=0.1),
                ce_case(4096, 128256, bf16), ce_case(1024, 262144, bf16),           # large vocabularies
                ce_case(128, 10, f32), accuracy_case(128, 10, f32),                  # MNIST
                ce_case(512, 4, f32), ce_case(512, 10, f32)]                         # Char-CNN, ResNet-18
    return [c for c in out if keep(c.dtype)]
