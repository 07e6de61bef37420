"""A bf16 training step held against an fp32 one: the shared check of the ResNet GPU tests
(tests/test_resnet.py, tests/test_conv2d.py)."""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels.testing import rel_err


class Fp32StepBounds:
    """``Fp32StepBounds(exact, eager, x, labels)`` takes one cross-entropy training step of ``exact`` in fp32
    and one of ``eager`` (the same weights) under bf16 autocast, tf32 off in both. ``check(model, run)`` then
    takes a bf16-autocast step of ``run`` (default: ``model``) and asserts that its loss and every gradient of
    ``model`` are no further from fp32's than eager bf16's (2x, with a floor: 1 % of the loss, 2e-2 per
    gradient). Two bf16 runs differ from each other by up to the sum of their errors, and a deep net's
    first-layer gradient in bf16 differs from fp32 by tens of percent, so bf16 runs are only compared with fp32."""

    def __init__(self, exact, eager, x: torch.Tensor, labels: torch.Tensor) -> None:
        self.exact, self.x, self.labels = exact, x, labels
        self.loss = self.step(exact, amp=False)
        self.loss_bound = max(2 * abs(self.step(eager) - self.loss), 1e-2 * abs(self.loss))
        self.bounds = {name: max(2 * rel_err(pe.grad, p32.grad), 2e-2)
                       for (name, p32), pe in zip(exact.named_parameters(), eager.parameters())}

    def step(self, model, amp: bool = True) -> float:
        """One forward and backward of ``model`` (tf32 off); returns the loss."""
        tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.autocast(self.x.device.type, dtype=torch.bfloat16, enabled=amp):
                loss = functional.cross_entropy(model(self.x).float(), self.labels)
            loss.backward()
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
        return loss.item()

    def check(self, model, run=None) -> None:
        loss = self.step(run if run is not None else model)
        assert abs(loss - self.loss) <= self.loss_bound, (loss, self.loss, self.loss_bound)
        for (name, p32), p in zip(self.exact.named_parameters(), model.parameters()):
            err = rel_err(p.grad, p32.grad)
            assert err <= self.bounds[name], (name, err, self.bounds[name])
