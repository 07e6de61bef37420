"""Global average pool + linear head against float64: logits and every gradient (x, weight, bias),
channels_last / NCHW and the view matrix, bad input (CPU interpreter); bf16 at the ResNet head's shape on
the GPU."""
import pytest
import torch
from torch.nn import functional

from triton_kernels import pool_head
from triton_kernels.testing import assert_close

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, check_case, view_cases


def reference(x, weight, bias):
    return functional.linear(functional.adaptive_avg_pool2d(x.double(), 1).flatten(1), weight.double(),
                             bias.double() if bias is not None else None)


def _check(N, C, H, W, K, dtype, fmt, bias=True):
    x = torch.randn(N, C, H, W, device=DEVICE).to(dtype).to(memory_format=fmt).requires_grad_()
    w = (torch.randn(K, C, device=DEVICE) / C ** 0.5).requires_grad_()
    b = torch.randn(K, device=DEVICE).requires_grad_() if bias else None
    y = pool_head.pool_head(x, w, b)
    assert y.shape == (N, K) and y.dtype == dtype
    leaves = [t.detach().cpu().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = reference(*leaves)
    assert_close(y, ref, dtype, name="logits")
    g = torch.randn_like(ref)
    y.backward(g.to(y.device, y.dtype))
    ref.backward(g)
    assert x.grad.is_contiguous(memory_format=fmt)
    for name, t, leaf in zip(("dx", "dweight", "dbias"), (x, w, b), leaves):
        if t is not None:
            assert t.grad.dtype == t.dtype
            assert_close(t.grad, leaf.grad, dtype, name=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("N,C,H,W,K", [(19, 70, 3, 5, 10), (2, 16, 4, 4, 1), (33, 5, 1, 1, 17)])
def test_forward_backward(N, C, H, W, K, dtype, fmt):
    _check(N, C, H, W, K, dtype, fmt)


def test_without_bias():
    _check(5, 24, 2, 2, 3, torch.float32, torch.channels_last, bias=False)


VIEW_ARGS = {"x": Arg((17, 20, 3, 4)), "weight": Arg((10, 20)), "bias": Arg((10,), broadcast=(0,))}
CASES = view_cases(VIEW_ARGS)


def view_case(arg: str, layout: str, dtype_name: str) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    check_case(ViewCase(arg, layout), VIEW_ARGS, pool_head.pool_head, reference, dtype=getattr(torch, dtype_name),
               device=device)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_views(case):
    view_case(case.arg, case.layout, "float32")


@pytest.mark.parametrize("bad,match", [
    (lambda x, w: pool_head.pool_head(x[0], w), "x must have 4 dims"),
    (lambda x, w: pool_head.pool_head(x, w[:, :5]), "weight has 5 input features"),
    (lambda x, w: pool_head.pool_head(x, w, torch.zeros(3)), "bias has 3 values"),
    (lambda x, w: pool_head.pool_head(x, torch.zeros(300, 8)), "supports 1..256"),
    (lambda x, w: pool_head.pool_head(x[:, :, :0], w), "no pixels"),
    (lambda x, w: pool_head.pool_head(x.double(), w), "x has dtype"),
])
def test_bad_input_raises(bad, match):
    with pytest.raises(ValueError, match=match):
        bad(torch.randn(2, 8, 3, 3, device=DEVICE), torch.randn(4, 8, device=DEVICE))


def test_no_channels():
    """C = 0: the logits are the bias and its gradient the incoming one summed over samples (no channel block
    runs the weight-gradient kernel that writes it otherwise)."""
    x = torch.randn(3, 0, 2, 2, device=DEVICE)
    w = torch.randn(4, 0, device=DEVICE, requires_grad=True)
    b = torch.randn(4, device=DEVICE, requires_grad=True)
    logits = pool_head.pool_head(x, w, b)
    dl = torch.randn(3, 4, device=DEVICE)
    logits.backward(dl)
    assert torch.equal(logits, b.detach().expand(3, 4)) and w.grad.shape == (4, 0)
    assert_close(b.grad, dl.double().sum(0), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_resnet_head(dtype):
    _check(512, 512, 4, 4, 10, dtype, torch.channels_last)
    _check(1000, 130, 7, 7, 100, dtype, torch.contiguous_format)


@pytest.mark.gpu
def test_gpu_compile_fullgraph():
    """torch.compile(fullgraph=True) over the op: the logits and the gradients of x, weight and bias equal the
    eager call's."""
    x = torch.randn(64, 512, 4, 4, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(10, 512, device="cuda"), torch.randn(10, device="cuda")
    grads = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w, b: pool_head.pool_head(x, w, b), fullgraph=True)
    for fn in (lambda x, w, b: pool_head.pool_head(x, w, b), compiled):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        y = fn(*leaves)
        y.float().square().sum().backward()
        grads.append([y.detach()] + [t.grad for t in leaves])
    for name, eager, comp in zip(("logits", "dx", "dweight", "dbias"), *grads):
        assert_close(comp, eager.double(), torch.bfloat16, name=name)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu_views(case, isolated):
    isolated("tests.test_pool_head:view_case", case.arg, case.layout, "bfloat16")
