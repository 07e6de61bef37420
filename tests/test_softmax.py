"""Softmax / log-softmax: forward and gradient against float64, row and looped kernels, odd lengths,
huge logits, strided inputs, other dims, modules, errors (CPU interpreter); bf16, large rows and
torch.compile on the GPU."""
import pytest
import torch

from models.layers import LogSoftmax, Softmax
from triton_kernels import softmax as S
from triton_kernels.testing import assert_close, poison_

from .conftest import DEVICE

REF = {False: torch.softmax, True: torch.log_softmax}
FN = {False: S.softmax, True: S.log_softmax}


def _check(x, log, dim=-1, scale=1.0, grad_atol=None):
    x = x.detach().requires_grad_()
    y = FN[log](x, dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    x64 = x.detach().double().cpu().requires_grad_()
    y64 = REF[log](x64, dim)
    assert_close(y, y64, x.dtype, name="y", scale=scale)
    g = torch.randn_like(y)
    y.backward(g)
    y64.backward(g.double().cpu())
    if grad_atol is None:
        assert_close(x.grad, x64.grad, x.dtype, name="dx", scale=scale)
    else:  # the exact gradient is ~0 (saturated softmax): relative error is meaningless
        assert torch.isfinite(x.grad).all()
        assert (x.grad.double().cpu() - x64.grad).abs().max().item() <= grad_atol


@pytest.fixture(params=["row", "looped"])
def variant(request, monkeypatch):
    if request.param == "looped":  # force the long-row kernels on small rows
        monkeypatch.setattr(S, "MAX_FUSED_N", 16)
        monkeypatch.setattr(S, "_INTERPRET_LOOPED", S.Config({"BLOCK_N": 32}, 4, 1))
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("M,N", [(1, 1), (5, 3), (9, 17), (4, 1000)])
def test_forward_backward(M, N, dtype, log, variant):
    _check(torch.randn(M, N, device=DEVICE, dtype=dtype) * 3, log)


@pytest.mark.parametrize("log", [False, True])
def test_long_row_32001(log):
    _check(torch.randn(2, 32001, device=DEVICE), log)  # looped kernel at its real size


@pytest.mark.parametrize("log", [False, True])
def test_huge_logits(log, variant):
    x = torch.randn(6, 40, device=DEVICE) * 1e4
    _check(x, log, grad_atol=None if log else 1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_strided_and_other_dims(log, variant):
    base = torch.randn(12, 70, device=DEVICE)
    _check(base[::3, 5:60], log)                       # row stride 210, not contiguous
    _check(torch.randn(40, 9, device=DEVICE).t(), log)  # column stride 9
    _check(torch.randn(3, 7, 11, device=DEVICE), log, dim=1)
    _check(torch.randn(2, 3, 5, 19, device=DEVICE), log, dim=-1)


def test_output_fully_written():
    x = torch.randn(13, 37)
    y = S.softmax_forward(x)
    assert torch.isfinite(y).all()
    dx = S.softmax_backward(torch.randn(13, 37), y)
    assert torch.isfinite(dx).all()


def test_poisoned_buffers_are_replaced(monkeypatch):
    # the launcher allocates its outputs; a NaN-filled input row must give NaN only in that row
    x = torch.randn(4, 10)
    x[2] = poison_(torch.empty(10))
    y = S.softmax(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3]]).all()


def test_modules_match_torch():
    x = torch.randn(3, 4, 5)
    assert_close(Softmax(dim=1)(x), torch.softmax(x.double(), 1), torch.float32)
    assert_close(LogSoftmax(dim=-1)(x), torch.log_softmax(x.double(), -1), torch.float32)
    assert isinstance(Softmax(dim=1), torch.nn.Softmax) and isinstance(LogSoftmax(), torch.nn.LogSoftmax)


@pytest.mark.parametrize("bad,match", [
    (lambda: S.softmax(torch.randn(3, 4).double()), "x has dtype"),
    (lambda: S.softmax(torch.tensor(1.0)), "at least 1 dim"),
    (lambda: S.softmax(torch.randn(3, 4), dim=2), "dim must be"),
    (lambda: S.log_softmax([1.0, 2.0]), "x must be a torch.Tensor"),
    (lambda: S.softmax(torch.randint(0, 3, (3, 4))), "x has dtype"),
])
def test_bad_input_raises(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("M,N", [(16384, 8192), (65536, 1024), (1000, 32001), (7, 262144), (129, 1), (300, 17)])
def test_gpu_large_and_odd(M, N, dtype, log):
    _check(torch.randn(M, N, device="cuda", dtype=dtype) * 4, log)


@pytest.mark.gpu
@pytest.mark.parametrize("log", [False, True])
def test_gpu_non_contiguous_and_huge(log):
    _check(torch.randn(2048, 3000, device="cuda", dtype=torch.bfloat16)[::2, 100:2900], log)
    _check(torch.randn(512, 1000, device="cuda") * 1e4, log, grad_atol=None if log else 1e-6)


@pytest.mark.gpu
def test_gpu_compile_fullgraph():
    torch._dynamo.reset()
    net = torch.nn.Sequential(torch.nn.Linear(64, 300), LogSoftmax(dim=-1)).cuda()
    x = torch.randn(32, 64, device="cuda")
    compiled = torch.compile(net, fullgraph=True)
    y = compiled(x)
    assert_close(y, net(x).double(), torch.float32)
    y.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    assert torch._dynamo.explain(net)(x).graph_break_count == 0
