"""LayerNorm forward and every gradient (dx, dw, db) against float64, row and long-row (segmented)
kernels, 1-D and 2-D normalized shapes, strided inputs, no-affine variants; the fused
LayerNorm -> ReLU -> MaxPool1d inference kernel; modules; errors (CPU interpreter); bf16, the
acceptance and Char-CNN sizes and torch.compile on the GPU."""
import math
import pytest
import torch
import torch.nn.functional as F

from models.layers import LayerNorm, LayerNormReLUMaxPool
from triton_kernels import layernorm as LN
from triton_kernels.testing import assert_close, rel_err

from .conftest import DEVICE


def _check(x, shape, affine=True, bias=True, dtype=None, eps=1e-5):
    dtype = dtype or x.dtype
    x = x.detach().requires_grad_()
    w = (torch.randn(shape, device=x.device, dtype=x.dtype) * 0.5 + 1).requires_grad_() if affine else None
    b = (torch.randn(shape, device=x.device, dtype=x.dtype)).requires_grad_() if (affine and bias) else None
    y = LN.layer_norm(x, shape, w, b, eps)
    assert y.shape == x.shape and y.dtype == x.dtype
    leaves = [t.detach().double().cpu().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = F.layer_norm(leaves[0], shape, leaves[1], leaves[2], eps)
    assert_close(y, ref, dtype, name="y")
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g.double().cpu())
    for name, t, r in zip(("dx", "dw", "db"), (x, w, b), leaves):
        if t is not None:
            assert t.grad.dtype == t.dtype
            if name in ("dx", "dw") and math.prod(shape) == 1:
                # one element per row: x - mean == 0, so xhat, dx and dw are exactly 0 in exact arithmetic
                # and a relative error against a ~1e-17 reference means nothing; bound them absolutely
                assert t.grad.double().abs().max().item() <= 1e-3 * g.double().abs().sum().item()
                continue
            assert_close(t.grad, r.grad, dtype, name=name)


@pytest.fixture(params=["row", "long"])
def variant(request, monkeypatch):
    if request.param == "long":  # force the segmented long-row kernels on small rows
        monkeypatch.setattr(LN, "MAX_ROW_D", 8)
        monkeypatch.setattr(LN, "INTERPRET_LONG_BLOCK_D", 16)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("M,D", [(1, 3), (5, 17), (33, 64), (4, 1000)])
def test_forward_backward(M, D, dtype, variant):
    _check((torch.randn(M, D, device=DEVICE) * 2 + 3).to(dtype), (D,))


@pytest.mark.parametrize("shape,normalized", [((3, 16, 21), (16, 21)), ((2, 3, 5, 7), (5, 7)), ((4, 9), (4, 9))])
def test_two_dim_normalized_shape(shape, normalized, variant):
    _check(torch.randn(*shape, device=DEVICE), normalized)


@pytest.mark.parametrize("which", ["params_only", "x_only"])
def test_partial_gradients(which, variant):
    """Only the parameters (frozen input) or only the input (frozen parameters) need a gradient."""
    x = torch.randn(7, 3, 19, device=DEVICE) * 2 + 1
    w = torch.randn(3, 19, device=DEVICE) + 1
    b = torch.randn(3, 19, device=DEVICE)
    grad_x, grad_p = which == "x_only", which == "params_only"
    xs, ws, bs = (t.clone().requires_grad_(r) for t, r in ((x, grad_x), (w, grad_p), (b, grad_p)))
    y = LN.layer_norm(xs, (3, 19), ws, bs)
    g = torch.randn_like(y)
    y.backward(g)
    ref = [t.double().requires_grad_(r) for t, r in ((x, grad_x), (w, grad_p), (b, grad_p))]
    F.layer_norm(ref[0], (3, 19), ref[1], ref[2]).backward(g.double())
    for name, t, r in zip(("dx", "dw", "db"), (xs, ws, bs), ref):
        assert (t.grad is None) == (r.grad is None), name
        if t.grad is not None:
            assert_close(t.grad, r.grad, torch.float32, name=name)


@pytest.mark.parametrize("affine,bias", [(False, False), (True, False)])
def test_without_affine_or_bias(affine, bias, variant):
    _check(torch.randn(6, 45, device=DEVICE), (45,), affine=affine, bias=bias)


def test_rows_of_one_element():
    x = torch.randn(7, 1, device=DEVICE)
    w, b = torch.randn(1, requires_grad=True), torch.randn(1, requires_grad=True)
    y = LN.layer_norm(x.requires_grad_(), (1,), w, b)
    assert torch.allclose(y, b.expand(7, 1))  # xhat = 0
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and w.grad.abs().item() < 1e-6 and b.grad.item() == 7


def test_strided_inputs(variant):
    base = torch.randn(20, 90, device=DEVICE) * 3 + 1
    _check(base[::2, 10:70], (60,))                          # row stride 180
    _check(torch.randn(30, 12, device=DEVICE).t(), (30,))    # column stride 12 (copied once)
    _check(torch.randn(4, 6, 10, device=DEVICE).transpose(0, 1), (10,))


def test_large_mean_small_variance(variant):
    # catastrophic-cancellation guard: with mean 1e3 and std 1e-2 a sum-of-squares variance would be
    # garbage; centred (Chan) statistics are as accurate as torch's own fp32 LayerNorm
    x = torch.randn(4, 300, device=DEVICE) * 1e-2 + 1e3
    ref = F.layer_norm(x.double(), (300,))
    torch_err = rel_err(F.layer_norm(x, (300,)), ref)
    assert rel_err(LN.layer_norm(x, (300,)), ref) <= max(2 * torch_err, 1e-5)


@pytest.mark.parametrize("pool", [3, 2])
@pytest.mark.parametrize("B,C,L", [(2, 4, 30), (3, 5, 17), (1, 16, 64)])
def test_fused_ln_relu_maxpool(B, C, L, pool):
    x = torch.randn(B, C, L, device=DEVICE) * 2 + 0.5
    w, b = torch.randn(C, L, device=DEVICE), torch.randn(C, L, device=DEVICE)
    with torch.no_grad():
        y = LN.layer_norm_relu_maxpool(x, w, b, pool=pool)
    ref = F.max_pool1d(F.relu(F.layer_norm(x.double(), (C, L), w.double(), b.double())), pool, pool)
    assert y.shape == ref.shape
    assert_close(y, ref, torch.float32)
    with torch.no_grad():
        y2 = LN.layer_norm_relu_maxpool(x[:, :, :], None, None, pool=pool)
    assert_close(y2, F.max_pool1d(F.relu(F.layer_norm(x.double(), (C, L))), pool, pool), torch.float32)


def test_fused_module_state_dict_and_training_path():
    m = LayerNormReLUMaxPool([6, 24])
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    ref = torch.nn.LayerNorm([6, 24])
    ref.load_state_dict(m.state_dict())
    x = torch.randn(3, 6, 24)
    expect = F.max_pool1d(F.relu(ref(x)), 3, 3)
    with torch.no_grad():
        assert_close(m(x), expect.double(), torch.float32)
    y = m(x)  # grad enabled: Triton LayerNorm + relu + max_pool1d, differentiable
    assert_close(y, expect.double(), torch.float32)
    y.sum().backward()
    assert m.weight.grad is not None and torch.isfinite(m.weight.grad).all()
    assert "pool=3" in repr(m)


def test_layernorm_module_matches_nn():
    m = LayerNorm([5, 8])
    ref = torch.nn.LayerNorm([5, 8])
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    m.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 5, 8)
    assert_close(m(x), ref(x).double(), torch.float32)
    assert isinstance(m, torch.nn.LayerNorm)


@pytest.mark.parametrize("bad,match", [
    (lambda x: LN.layer_norm(x, (7,)), "trailing dims must equal"),
    (lambda x: LN.layer_norm(x.double(), (6,)), "x has dtype"),
    (lambda x: LN.layer_norm(x, (6,), torch.ones(5)), "weight has shape"),
    (lambda x: LN.layer_norm(x, (6,), None, torch.ones(6).to("meta")), "bias is on meta"),
    (lambda x: LN.layer_norm(x, (6,), eps=-1.0), "eps must be"),
    (lambda x: LN.layer_norm(x, ()), "at least one dim"),
    (lambda x: LN.layer_norm_relu_maxpool(x), "x must have 3 dims"),
    (lambda x: LN.layer_norm_relu_maxpool(x[None], torch.ones(4, 5)), "weight has shape"),
    (lambda x: LN.layer_norm_relu_maxpool(x[None], pool=0), "pool must be"),
    (lambda x: LN.layer_norm_relu_maxpool(x[None, :, :2]), "length 2 < pool 3"),
    (lambda x: LN.layer_norm_relu_maxpool(x[None].requires_grad_()), "inference kernel"),
    (lambda x: LayerNormReLUMaxPool([6]), "normalized_shape must be \\[C, L\\]"),
])
def test_bad_input_raises(bad, match):
    x = torch.randn(4, 6)
    with pytest.raises(ValueError, match=match):
        bad(x)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("M,shape", [(16384, (8192,)), (4096, (1000,)), (128, (256, 1008)), (3, (100003,)),
                                     (1000, (1,)), (777, (17,))])
def test_gpu_large_and_odd(M, shape, dtype):
    _check(torch.randn(M, *shape, device="cuda", dtype=dtype) * 2 + 1, shape)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_charcnn_fused(dtype):
    for B, L in ((128, 1008), (512, 30)):  # Char-CNN block 1 ([256, 1008]) and block 6 ([256, 30])
        x = torch.randn(B, 256, L, device="cuda", dtype=dtype)
        w = torch.randn(256, L, device="cuda", dtype=dtype)
        b = torch.randn(256, L, device="cuda", dtype=dtype)
        with torch.no_grad():
            y = LN.layer_norm_relu_maxpool(x, w, b)
        ref = F.max_pool1d(F.relu(F.layer_norm(x.double(), (256, L), w.double(), b.double())), 3, 3)
        assert_close(y, ref, dtype)


@pytest.mark.gpu
def test_gpu_non_contiguous():
    x = torch.randn(4096, 3000, device="cuda", dtype=torch.bfloat16)[::2, 100:2148]
    _check(x, (2048,))


@pytest.mark.gpu
def test_gpu_compile_fullgraph():
    torch._dynamo.reset()
    net = torch.nn.Sequential(torch.nn.Linear(64, 512), LayerNorm(512)).cuda()
    x = torch.randn(128, 64, device="cuda")
    compiled = torch.compile(net, fullgraph=True)
    y = compiled(x)
    assert_close(y, net(x).double(), torch.float32)
    y.square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    assert torch._dynamo.explain(net)(x).graph_break_count == 0
    pool = LayerNormReLUMaxPool([16, 60]).cuda().eval()
    xp = torch.randn(8, 16, 60, device="cuda")
    with torch.no_grad():
        assert_close(torch.compile(pool, fullgraph=True)(xp), pool(xp).double(), torch.float32)
