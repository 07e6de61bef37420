"""The one-launch backward of a short GEMM (triton_kernels/gemm_backward.py): dA, dB and dbias against
float64 for relu and no activation, every layout and odd shapes, outputs poisoned before the launch; the
same gradients as gemm.py's three launches; where it is used."""
import pytest
import torch

from models.layers import Linear
from triton_kernels import gemm, gemm_backward
from triton_kernels.testing import assert_close, poison_

from .conftest import DEVICE


def _operands(M, N, K, dtype, ta, tb, act):
    """A, B (as the forward read them), bias, dC, and what the forward saved (relu: its output)."""
    a = torch.randn(K, M, device=DEVICE, dtype=dtype).t() if ta else torch.randn(M, K, device=DEVICE, dtype=dtype)
    b = torch.randn(N, K, device=DEVICE, dtype=dtype).t() if tb else torch.randn(K, N, device=DEVICE, dtype=dtype)
    bias = torch.randn(N, device=DEVICE, dtype=dtype)
    dc = torch.randn(M, N, device=DEVICE, dtype=dtype)
    saved = gemm.gemm(a, b, bias, None, act) if act != "none" else None
    return a, b, bias, dc, saved


def _reference(a, b, dc, saved):
    """float64 dA, dB, dbias; relu's mask taken off the saved output, as the kernel reads it."""
    dz = dc.double() * ((saved > 0).double() if saved is not None else 1.0)
    return dz @ b.double().t(), a.double().t() @ dz, dz.sum(0)


@pytest.mark.parametrize("act", gemm_backward.ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (17, 3, 5), (33, 40, 70), (70, 130, 45)])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, True)])
def test_fused_backward_matches_float64(M, N, K, dtype, act, ta, tb):
    a, b, _, dc, saved = _operands(M, N, K, dtype, ta, tb, act)
    da, db, dbias = gemm_backward.buffers(dc, a, b, True, True, dtype, gemm.grad_b_transposed(b))
    for t in (da, db, dbias):
        poison_(t)
    kernel, grid, args = gemm_backward.launch_args(dc, saved, a, b, da, db, dbias, act, "ieee")
    kernel.launch(grid, **args)
    ref = _reference(a, b, dc, saved)
    for name, got, want in zip(("dA", "dB", "dbias"), (da, db, dbias), ref):
        assert_close(got, want, dtype, name=name)
    assert db.stride() == ((1, K) if gemm.grad_b_transposed(b) else (N, 1))  # dB in B's layout


@pytest.mark.parametrize("act", gemm_backward.ACTIVATIONS)
@pytest.mark.parametrize("needs", [(True, True, True, False), (False, True, True, False), (True, True, False, True),
                                   (False, True, False, False)])
def test_fused_and_three_launch_backward_agree(act, needs):
    """gemm.backward_ops with fused=True and fused=False: the same gradients (within rounding: only the
    order of the sums differs), the same ones missing."""
    a, b, _, dc, saved = _operands(33, 40, 70, torch.float32, False, True, act)
    fused = gemm.backward_ops(dc, a, b, saved, needs, act, "ieee", torch.float32, fused=True)
    three = gemm.backward_ops(dc, a, b, saved, needs, act, "ieee", torch.float32, fused=False)
    for got, want in zip(fused, three):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.shape == want.shape
            assert_close(got, want.double(), torch.float32)


def test_linear_trains_through_the_fused_backward_as_nn_linear():
    """A Linear + ReLU with an expanded dC (y.sum().backward(): stride 0) and a NaN input row: every gradient
    as nn.Linear's in float64, NaN where torch puts it, prepared calls included (three steps)."""
    torch.manual_seed(0)
    ours = Linear(24, 16, activation="relu").to(DEVICE)
    twin = torch.nn.Linear(24, 16).double().to(DEVICE)
    twin.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    x = torch.randn(9, 24, device=DEVICE)
    x[3, 5] = float("nan")
    for _ in range(3):
        ours.zero_grad()
        twin.zero_grad()
        xa, xb = x.clone().requires_grad_(), x.double().requires_grad_()
        ours(xa).sum().backward()
        torch.relu(twin(xb)).sum().backward()
        for got, want in ((xa.grad, xb.grad), (ours.weight.grad, twin.weight.grad), (ours.bias.grad, twin.bias.grad)):
            assert torch.equal(got.isnan(), want.isnan())
            assert_close(torch.nan_to_num(got), torch.nan_to_num(want), torch.float32)


def test_where_it_applies():
    all_four = (True, True, True, False)
    assert gemm_backward.applies(128, 10, 784, "relu", all_four)
    assert gemm_backward.applies(512, 1024, 1024, "relu", all_four)  # the Char-CNN's fc2: 2.1e9 FLOPs
    assert not gemm_backward.applies(512, 1024, 8704, "relu", all_four)  # fc1, 1.8e10: gemm.py's TMA kernels
    assert not gemm_backward.applies(128, 10, 784, "gelu", all_four)  # GELU's derivative: recomputed per tile
    assert not gemm_backward.applies(128, 10, 784, "relu", (True, False, True, False))  # no dB, no fused kernel


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", [(torch.bfloat16, "ieee"), (torch.float16, "ieee"), (torch.float32, "tf32"),
                                             (torch.float32, "ieee"), (torch.float32, "tf32x3")])
@pytest.mark.parametrize("act", gemm_backward.ACTIVATIONS)
@pytest.mark.parametrize("M,N,K,tb", [(128, 10, 784, True), (1024, 16, 16, True), (512, 1024, 8704, True),
                                      (1000, 513, 777, False), (129, 3, 8, False)])
def test_gpu_fused_backward_study_shapes(M, N, K, tb, dtype, precision, act):
    """The studies' Linear shapes (B K-major: nn.Linear's weight) and odd ones, every dtype and precision,
    through Linear's path (gemm.linear, prepared calls included) against float64."""
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=dtype)
    w = (torch.randn(N, K, device="cuda", dtype=dtype) / K ** 0.5) if tb else \
        (torch.randn(K, N, device="cuda", dtype=dtype) / K ** 0.5).t()
    bias = torch.randn(N, device="cuda", dtype=dtype)
    dy = torch.randn(M, N, device="cuda", dtype=dtype)
    for _ in range(3):  # the general path, then the prepared call
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, bias)]
        y = gemm.linear(*leaves, activation=act, precision=precision)
        grads = torch.autograd.grad(y, leaves, dy)
        mask = (y.double() > 0).double() if act == "relu" else 1.0
        dz = dy.double() * mask
        want = (dz @ w.double(), dz.t() @ x.double(), dz.sum(0))
        for name, got, ref in zip(("dx", "dw", "dbias"), grads, want):
            assert_close(got, ref, dtype, tf32=precision == "tf32", name=name, scale=3.0 if precision == "tf32" else 1.0)
