"""LayerNorm forward and every gradient (dx, dw, db) against float64, row and long-row (segmented)
kernels (chosen through ``config=``), 1-D and 2-D normalized shapes, strided inputs, no-affine
variants; the fused LayerNorm -> ReLU -> MaxPool1d inference kernel; the generated view/stride matrix
(x, weight, bias, and dy of the backward launcher); extreme values (a large mean with a tiny variance,
large offsets) against torch's own fp32 error; NaN through the fused epilogue; empty dims; modules;
errors (CPU interpreter); bf16, the acceptance and Char-CNN sizes, the view matrix at long-row sizes
and torch.compile on the GPU."""
import math
import pytest
import torch
from torch.nn import functional

from models.layers import LayerNorm, LayerNormReLUMaxPool
from triton_kernels import layernorm
from triton_kernels import runtime
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, rel_err, second_derivatives, tolerance

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, check_case, view_cases


def _config(path: str | None, D: int) -> Config | None:
    """The kernel path by config: the row kernels, or the long-row (segmented) kernels with a chunk short
    enough that a test row spans at least two chunks (a short one, so the interpreter does not take
    hundreds of steps); None: the size-chosen, tuned path."""
    if path == "row":
        return Config({"BLOCK_M": 2, "PER_SM": 2}, 4, 1)
    if path == "long":
        return Config({"BLOCK_D": 16 if D <= 32 else 32 if D <= 128 else 256}, 4, 1)
    return None


def _check(x, shape, affine=True, bias=True, dtype=None, eps=1e-5, path=None):
    dtype = dtype or x.dtype
    x = x.detach().requires_grad_()
    w = (torch.randn(shape, device=x.device, dtype=x.dtype) * 0.5 + 1).requires_grad_() if affine else None
    b = (torch.randn(shape, device=x.device, dtype=x.dtype)).requires_grad_() if (affine and bias) else None
    y = layernorm.layer_norm(x, shape, w, b, eps, config=_config(path, math.prod(shape)))
    assert y.shape == x.shape and y.dtype == x.dtype
    leaves = [t.detach().double().cpu().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = functional.layer_norm(leaves[0], shape, leaves[1], leaves[2], eps)
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
def variant(request):
    """The kernel path (see _config): the long-row kernels run on small rows through config=."""
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("M,D", [(1, 3), (5, 17), (33, 64), (4, 1000)])
def test_forward_backward(M, D, dtype, variant):
    _check((torch.randn(M, D, device=DEVICE) * 2 + 3).to(dtype), (D,), path=variant)


@pytest.mark.parametrize("shape,normalized", [((3, 16, 21), (16, 21)), ((2, 3, 5, 7), (5, 7)), ((4, 9), (4, 9))])
def test_two_dim_normalized_shape(shape, normalized, variant):
    _check(torch.randn(*shape, device=DEVICE), normalized, path=variant)


@pytest.mark.parametrize("which", ["params_only", "x_only"])
def test_partial_gradients(which, variant):
    """Only the parameters (frozen input) or only the input (frozen parameters) need a gradient."""
    x = torch.randn(7, 3, 19, device=DEVICE) * 2 + 1
    w = torch.randn(3, 19, device=DEVICE) + 1
    b = torch.randn(3, 19, device=DEVICE)
    grad_x, grad_p = which == "x_only", which == "params_only"
    xs, ws, bs = (t.clone().requires_grad_(r) for t, r in ((x, grad_x), (w, grad_p), (b, grad_p)))
    y = layernorm.layer_norm(xs, (3, 19), ws, bs, config=_config(variant, 57))
    g = torch.randn_like(y)
    y.backward(g)
    ref = [t.double().requires_grad_(r) for t, r in ((x, grad_x), (w, grad_p), (b, grad_p))]
    functional.layer_norm(ref[0], (3, 19), ref[1], ref[2]).backward(g.double())
    for name, t, r in zip(("dx", "dw", "db"), (xs, ws, bs), ref):
        assert (t.grad is None) == (r.grad is None), name
        if t.grad is not None:
            assert_close(t.grad, r.grad, torch.float32, name=name)


@pytest.mark.parametrize("affine,bias", [(False, False), (True, False)])
def test_without_affine_or_bias(affine, bias, variant):
    _check(torch.randn(6, 45, device=DEVICE), (45,), affine=affine, bias=bias, path=variant)


def test_rows_of_one_element():
    x = torch.randn(7, 1, device=DEVICE)
    w, b = torch.randn(1, requires_grad=True), torch.randn(1, requires_grad=True)
    y = layernorm.layer_norm(x.requires_grad_(), (1,), w, b)
    assert torch.allclose(y, b.expand(7, 1))  # xhat = 0
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and w.grad.abs().item() < 1e-6 and b.grad.item() == 7


def test_large_mean_small_variance(variant):
    # catastrophic-cancellation guard: with mean 1e3 and std 1e-2 a sum-of-squares variance would be
    # garbage; centred (Chan) statistics are as accurate as torch's own fp32 LayerNorm
    x = torch.randn(4, 300, device=DEVICE) * 1e-2 + 1e3
    ref = functional.layer_norm(x.double(), (300,))
    torch_err = rel_err(functional.layer_norm(x, (300,)), ref)
    assert rel_err(layernorm.layer_norm(x, (300,), config=_config(variant, 300)), ref) <= max(2 * torch_err, 1e-5)


@pytest.mark.parametrize("pool", [3, 2])
@pytest.mark.parametrize("B,C,L", [(2, 4, 30), (3, 5, 17), (1, 16, 64)])
def test_fused_ln_relu_maxpool(B, C, L, pool):
    x = torch.randn(B, C, L, device=DEVICE) * 2 + 0.5
    w, b = torch.randn(C, L, device=DEVICE), torch.randn(C, L, device=DEVICE)
    with torch.no_grad():
        y = layernorm.layer_norm_relu_maxpool(x, w, b, pool=pool)
    ref = functional.max_pool1d(functional.relu(functional.layer_norm(x.double(), (C, L), w.double(), b.double())),
                                pool, pool)
    assert y.shape == ref.shape
    assert_close(y, ref, torch.float32)
    with torch.no_grad():
        y2 = layernorm.layer_norm_relu_maxpool(x[:, :, :], None, None, pool=pool)
    assert_close(y2, functional.max_pool1d(functional.relu(functional.layer_norm(x.double(), (C, L))), pool, pool),
                 torch.float32)


def test_fused_module_state_dict_and_training_path():
    m = LayerNormReLUMaxPool([6, 24])
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    ref = torch.nn.LayerNorm([6, 24])
    ref.load_state_dict(m.state_dict())
    x = torch.randn(3, 6, 24)
    expect = functional.max_pool1d(functional.relu(ref(x)), 3, 3)
    with torch.no_grad():
        assert_close(m(x), expect.double(), torch.float32)
    y = m(x)  # grad enabled: Triton LayerNorm + relu + max_pool1d, differentiable
    assert_close(y, expect.double(), torch.float32)
    y.sum().backward()
    assert m.weight.grad is not None and torch.isfinite(m.weight.grad).all()
    assert "pool=3" in repr(m)


def _double_backward_runs(fn, leaves, out_weight, directions, calls=3):
    """second_derivatives of ``calls`` calls of fn, each on fresh copies of the leaves."""
    return [second_derivatives(fn, [t.clone().requires_grad_() for t in leaves], out_weight, directions)
            for _ in range(calls)]


@pytest.mark.parametrize("affine", ["weight_bias", "weight", "none"])
@pytest.mark.parametrize("shape", [(8,), (3, 4)], ids=["1d", "2d"])
def test_double_backward_matches_float64(shape, affine):
    """create_graph=True: gradients and second derivatives in x, weight and bias (incoming gradient
    depending on all of them) of three calls of one signature -- the first call's and the prepared call's
    backward -- and of the registered op torch.compile traces equal float64 torch's, bit for bit alike."""
    x = torch.randn(5, *shape, device=DEVICE) * 2 + 1
    params = [torch.randn(shape, device=DEVICE) * 0.5 + 1, torch.randn(shape, device=DEVICE)]
    params = params[:{"weight_bias": 2, "weight": 1, "none": 0}[affine]]
    leaves = [x, *params]
    out_weight = torch.randn(x.shape, device=DEVICE, dtype=torch.float64)
    directions = [torch.randn(t.shape, device=DEVICE, dtype=torch.float64) for t in leaves]

    def ours(x, *params):
        return layernorm.layer_norm(x, shape, *params)

    def registered_op(x, *params):
        D = math.prod(shape)
        flat = [t.reshape(D) for t in params] + [None] * (2 - len(params))
        return layernorm._ln_call(x.reshape(-1, D), *flat, 1e-5, True, "")[0].reshape(x.shape)

    reference = second_derivatives(lambda x, *params: functional.layer_norm(x, shape, *params),
                                   [t.double().requires_grad_() for t in leaves], out_weight, directions)
    runs = _double_backward_runs(ours, leaves, out_weight, directions)
    runs += _double_backward_runs(registered_op, leaves, out_weight, directions, calls=1)
    for run, (grads, second) in enumerate(runs):
        for i, name in enumerate(("x", "weight", "bias")[:len(leaves)]):
            assert_close(grads[i], reference[0][i], torch.float32, name=f"run {run}: gradient in {name}")
            assert_close(second[i], reference[1][i], torch.float32, name=f"run {run}: second derivative in {name}")
            assert torch.equal(second[i], runs[0][1][i]), f"run {run}: second derivative in {name} differs"


def test_fused_module_training_path_double_backward():
    """LayerNormReLUMaxPool trains through layer_norm + relu + max_pool1d: its second derivatives (three
    calls: the first call's and the prepared call's backward) equal float64 torch's. The fused inference
    kernel itself refuses inputs that need a gradient."""
    module = LayerNormReLUMaxPool([4, 6]).to(DEVICE)
    with torch.no_grad():
        module.weight.normal_()
        module.bias.normal_()
    x = torch.randn(2, 4, 6, device=DEVICE)
    out_weight = torch.randn(2, 4, 2, device=DEVICE, dtype=torch.float64)
    directions = [torch.randn(t.shape, device=DEVICE, dtype=torch.float64) for t in (x, module.weight, module.bias)]

    def reference(x, weight, bias):
        return functional.max_pool1d(functional.relu(functional.layer_norm(x, (4, 6), weight, bias)), 3, 3)

    leaves64 = [t.detach().double().requires_grad_() for t in (x, module.weight, module.bias)]
    expect = second_derivatives(reference, leaves64, out_weight, directions)
    for run in range(3):
        grads, second = second_derivatives(lambda x, weight, bias: module(x),
                                           [x.clone().requires_grad_(), module.weight, module.bias], out_weight,
                                           directions)
        for i, name in enumerate(("x", "weight", "bias")):
            assert_close(grads[i], expect[0][i], torch.float32, name=f"run {run}: gradient in {name}")
            assert_close(second[i], expect[1][i], torch.float32, name=f"run {run}: second derivative in {name}")
    with pytest.raises(ValueError, match="inference kernel"):
        layernorm.layer_norm_relu_maxpool(x.requires_grad_(), module.weight, module.bias, pool=3)


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


# ------------------------------------------------------------------------------- view/stride matrix
def _ln_args(kind: str, size: str):
    """(args, normalized_shape): x 2-D with a 1-D weight / bias (stride 0 from one element when expanded),
    or x 3-D over a (C, L) normalized shape whose weight is expanded along C (reshape copies it) and whose
    bias is expanded from one element. "long" sizes (D = 20000 > MAX_ROW_D) take the long-row kernels on
    the size-chosen path."""
    if kind == "2d":
        D = 24 if size == "tiny" else 20000
        return ({"x": Arg((3, D), broadcast=(0,)), "weight": Arg((D,), broadcast=(0,)),
                 "bias": Arg((D,), broadcast=(0,))}, (D,))
    C, L = (3, 8) if size == "tiny" else (4, 5000)
    return ({"x": Arg((2, C, L), broadcast=(0,)), "weight": Arg((C, L), broadcast=(0,)),
             "bias": Arg((C, L), broadcast=(0, 1))}, (C, L))


def view_case(arg: str, layout: str, dtype_name: str, kind: str, size: str, path: str | None) -> None:
    """layer_norm with one of x / weight / bias laid out as ``layout``: y and every gradient vs float64."""
    args, normalized = _ln_args(kind, size)
    config = _config(path, math.prod(normalized))
    check_case(ViewCase(arg, layout), args,
               lambda x, weight, bias: layernorm.layer_norm(x, normalized, weight, bias, config=config),
               lambda x, weight, bias: functional.layer_norm(x, normalized, weight, bias),
               dtype=getattr(torch, dtype_name), device=DEVICE)


def _pool_args(size: str):
    C, L = (3, 12) if size == "tiny" else (8, 3000)
    return {"x": Arg((2, C, L), broadcast=(0,), grad=False), "weight": Arg((C, L), broadcast=(0,), grad=False),
            "bias": Arg((C, L), broadcast=(0, 1), grad=False)}


def pool_view_case(arg: str, layout: str, dtype_name: str, size: str, config_blocks: tuple | None) -> None:
    """layer_norm_relu_maxpool with one of x / weight / bias laid out as ``layout`` vs float64.
    config_blocks: (BLOCK_D, BLOCK_O) or None for the default tiling."""
    config = Config({"BLOCK_D": config_blocks[0], "BLOCK_O": config_blocks[1]}, 4, 1) if config_blocks else None

    def ref(x, weight, bias):
        return functional.max_pool1d(functional.relu(functional.layer_norm(x, x.shape[1:], weight, bias)), 3, 3)

    check_case(ViewCase(arg, layout), _pool_args(size),
               lambda x, weight, bias: layernorm.layer_norm_relu_maxpool(x, weight, bias, pool=3, config=config), ref,
               dtype=getattr(torch, dtype_name), device=DEVICE)


def backward_view_case(layout: str, dtype_name: str, size: str, path: str | None) -> None:
    """The backward launcher with dy laid out as ``layout`` (x, weight and the statistics from the forward
    launcher): dx, dw, db vs float64."""
    dtype = getattr(torch, dtype_name)
    M, D = (4, 24) if size == "tiny" else (3, 20000)
    config = _config(path, D)
    x = (torch.randn(M, D, device=DEVICE) * 2 + 1).to(dtype)
    w = (torch.randn(D, device=DEVICE) + 1).to(dtype)
    b = torch.randn(D, device=DEVICE).to(dtype)
    _, mean, rstd = layernorm.layer_norm_forward(x, w, b, 1e-5, True, config)
    x64, w64, b64 = (t.detach().cpu().double().requires_grad_() for t in (x, w, b))

    def ours(dy):
        return layernorm.layer_norm_backward(dy, x, w, mean, rstd, True, True, True, config)

    def ref(dy):
        return torch.autograd.grad(functional.layer_norm(x64, (D,), w64, b64), (x64, w64, b64), dy)

    check_case(ViewCase("dy", layout), {"dy": Arg((M, D), broadcast=(0,), grad=False)}, ours, ref, dtype=dtype,
               device=DEVICE)


LN_CASES = {kind: view_cases(_ln_args(kind, "tiny")[0]) for kind in ("2d", "3d")}
POOL_CASES = view_cases(_pool_args("tiny"))
DY_CASES = [c for c in view_cases({"dy": Arg((4, 24), broadcast=(0,))}) if c.arg]


# the row kernels in fp32 and fp16, the long-row kernels (the same strides, other code) in fp32
PATH_DTYPES = [("row", "float32"), ("row", "float16"), ("long", "float32")]


@pytest.mark.parametrize("path,dtype_name", PATH_DTYPES, ids=lambda v: str(v))
@pytest.mark.parametrize("kind,case", [(k, c) for k, cases in LN_CASES.items() for c in cases],
                         ids=lambda v: str(v))
def test_view_matrix(kind, case, path, dtype_name):
    view_case(case.arg, case.layout, dtype_name, kind, "tiny", path)


@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_pool_view_matrix(case, dtype_name):
    pool_view_case(case.arg, case.layout, dtype_name, "tiny", (32, 16))


@pytest.mark.parametrize("path,dtype_name", PATH_DTYPES, ids=lambda v: str(v))
@pytest.mark.parametrize("case", DY_CASES, ids=str)
def test_backward_view_matrix(case, path, dtype_name):
    backward_view_case(case.layout, dtype_name, "tiny", path)


# ------------------------------------------------------------------------------- extreme values
def _errors_vs_torch(ours, torch32, ref64):
    """(our relative error, the bound max(2 x torch's fp32 error, the fp32 table tolerance))."""
    return rel_err(ours, ref64), max(2 * rel_err(torch32, ref64), tolerance(torch.float32))


@pytest.mark.parametrize("offset,spread", [(1e4, 1e-3), (1e5, 1e-2), (1e5, 1.0)])
def test_large_mean_tiny_variance(offset, spread, variant):
    """Rows offset + spread * noise (the mean ~1e4-1e5 times the spread): y, dx, dw, db within 2x torch's
    own fp32 error -- and, since the shifted statistics lose nothing, within the fp32 table tolerance
    even where torch's error is larger (its backward on such rows is off by ~1e-2)."""
    M, D = 4, 300
    x = (offset + spread * torch.randn(M, D, device=DEVICE)).requires_grad_()
    w = (torch.randn(D, device=DEVICE) * 0.5 + 1).requires_grad_()
    b = torch.randn(D, device=DEVICE).requires_grad_()
    leaves = {"ours": (x, w, b)}
    leaves["torch"] = tuple(t.detach().clone().requires_grad_() for t in (x, w, b))
    leaves["ref"] = tuple(t.detach().cpu().double().requires_grad_() for t in (x, w, b))
    g = torch.randn(M, D, device=DEVICE)
    outs = {"ours": layernorm.layer_norm(x, (D,), w, b, config=_config(variant, D)),
            "torch": functional.layer_norm(leaves["torch"][0], (D,), *leaves["torch"][1:]),
            "ref": functional.layer_norm(leaves["ref"][0], (D,), *leaves["ref"][1:])}
    for k, out in outs.items():
        out.backward(g.double().cpu() if k == "ref" else g)
    results = [("y", outs["ours"], outs["torch"], outs["ref"])]
    for i, name in enumerate(("dx", "dw", "db")):
        results.append((name, leaves["ours"][i].grad, leaves["torch"][i].grad, leaves["ref"][i].grad))
    for name, ours, theirs, ref in results:
        err, bound = _errors_vs_torch(ours, theirs, ref)
        assert err <= bound, f"{name}: {err:.3e} > max(2 x torch's {rel_err(theirs, ref):.3e}, table)"
        assert err <= tolerance(torch.float32), f"{name}: {err:.3e} (torch's fp32: {rel_err(theirs, ref):.3e})"


@pytest.mark.parametrize("offset,spread", [(1e4, 1e-3), (1e5, 1.0)])
def test_fused_large_mean_tiny_variance(offset, spread):
    x = offset + spread * torch.randn(2, 4, 30, device=DEVICE)
    w, b = torch.randn(4, 30, device=DEVICE), torch.randn(4, 30, device=DEVICE)

    def f(x, w, b):
        return functional.max_pool1d(functional.relu(functional.layer_norm(x, (4, 30), w, b)), 3, 3)

    with torch.no_grad():
        y = layernorm.layer_norm_relu_maxpool(x, w, b, config=Config({"BLOCK_D": 16, "BLOCK_O": 16}, 4, 1))
    err, bound = _errors_vs_torch(y, f(x, w, b), f(x.double(), w.double(), b.double()))
    assert err <= bound and err <= tolerance(torch.float32), f"{err:.3e} (bound {bound:.1e})"


# ------------------------------------------------------------------------------- NaN, inf, empty
def _same_specials(y, ref):
    """NaN and inf where torch has them, the finite values within the fp32 tolerance."""
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN pattern differs from torch's"
    assert torch.equal(torch.isinf(y), torch.isinf(ref)) and torch.equal(y[torch.isinf(y)], ref[torch.isinf(ref)])
    finite = torch.isfinite(ref)
    assert_close(y[finite], ref[finite].double(), torch.float32)


@pytest.mark.parametrize("where", ["x", "weight", "bias", "bias_inf"])
def test_fused_nan_and_inf_like_torch(where):
    """torch's relu keeps NaN and max_pool1d propagates it: a NaN tap makes its pooled output NaN (a NaN
    in x makes its whole sample NaN); +-inf biases go through the max and the relu as in torch."""
    x = torch.randn(3, 4, 30, device=DEVICE)
    w, b = torch.randn(4, 30, device=DEVICE), torch.randn(4, 30, device=DEVICE)
    if where == "x":
        x[1, 2, 5] = float("nan")
    elif where == "weight":
        w[1, 7] = float("nan")
        w[3, 29] = float("nan")
    elif where == "bias":
        b[0, 0] = float("nan")
        b[2, 13] = float("nan")
    else:
        b[0, 4] = float("inf")
        b[2, 10:12] = float("-inf")
        b[3, 0:3] = float("-inf")  # a whole window of -inf: max -inf, relu 0
    with torch.no_grad():
        y = layernorm.layer_norm_relu_maxpool(x, w, b, config=Config({"BLOCK_D": 16, "BLOCK_O": 16}, 4, 1))
    _same_specials(y, functional.max_pool1d(functional.relu(functional.layer_norm(x, (4, 30), w, b)), 3, 3))


def test_nan_propagates_like_torch(variant):
    x = torch.randn(4, 40, device=DEVICE)
    w, b = torch.randn(40, device=DEVICE), torch.randn(40, device=DEVICE)
    x[1, 3] = float("nan")
    x[2, 0] = float("inf")
    w[5] = float("nan")
    _same_specials(layernorm.layer_norm(x, (40,), w, b, config=_config(variant, 40)),
                   functional.layer_norm(x, (40,), w, b))


@pytest.mark.parametrize("shape,normalized", [((0, 5), (5,)), ((3, 0), (0,)), ((2, 0, 4), (4,)),
                                              ((2, 3, 0), (3, 0))])
def test_empty_like_torch(shape, normalized, variant):
    x = torch.randn(shape, device=DEVICE, requires_grad=True)
    w = torch.randn(normalized, device=DEVICE, requires_grad=True)
    b = torch.randn(normalized, device=DEVICE, requires_grad=True)
    y = layernorm.layer_norm(x, normalized, w, b, config=_config(variant, 8))
    theirs = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    ref = functional.layer_norm(theirs[0], normalized, theirs[1], theirs[2])
    assert y.shape == ref.shape and y.dtype == ref.dtype
    y.sum().backward()
    ref.sum().backward()
    for t, r in zip((x, w, b), theirs):
        assert t.grad.shape == r.grad.shape and torch.equal(t.grad, r.grad)


def test_fused_empty_batch_like_torch():
    x = torch.randn(0, 3, 7, device=DEVICE)
    with torch.no_grad():
        y = layernorm.layer_norm_relu_maxpool(x, torch.randn(3, 7, device=DEVICE), torch.randn(3, 7, device=DEVICE))
    assert y.shape == functional.max_pool1d(functional.relu(functional.layer_norm(x, (3, 7))), 3, 3).shape


@pytest.mark.parametrize("bad,match", [
    (lambda x: layernorm.layer_norm(x, (7,)), "trailing dims must equal"),
    (lambda x: layernorm.layer_norm(x.double(), (6,)), "x has dtype"),
    (lambda x: layernorm.layer_norm(x, (6,), torch.ones(5)), "weight has shape"),
    (lambda x: layernorm.layer_norm(x, (6,), None, torch.ones(6).to("meta")), "bias is on meta"),
    (lambda x: layernorm.layer_norm(x, (6,), eps=-1.0), "eps must be"),
    (lambda x: layernorm.layer_norm(x, ()), "at least one dim"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x), "x must have 3 dims"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x[None], torch.ones(4, 5)), "weight has shape"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x[None], pool=0), "pool must be"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x[None, :, :2]), "length 2 < pool 3"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x[None].requires_grad_()), "inference kernel"),
    (lambda x: LayerNormReLUMaxPool([6]), "normalized_shape must be \\[C, L\\]"),
    (lambda x: layernorm.layer_norm(x, (6,), config={"BLOCK_D": 16}), "config must be"),
    (lambda x: layernorm.layer_norm(x, (6,), config=Config({"BLOCK_D": 16, "BLOCK_M": 2})), "config must name"),
    (lambda x: layernorm.layer_norm(x, (6,), config=Config({"BLOCK_D": 12})), "power of two"),
    (lambda x: layernorm.layer_norm(x, (6,), config=Config({"PER_SM": 0})), "positive int"),
    (lambda x: layernorm.layer_norm_relu_maxpool(x[None], config=Config({"BLOCK_M": 2})), "config must name"),
    (lambda x: layernorm.layer_norm_forward(x.t(), None, None, 1e-5, False), "unit column stride"),
    (lambda x: layernorm.layer_norm_forward(x, torch.ones(2, 3), None, 1e-5, False), "weight has shape"),
    (lambda x: layernorm.layer_norm_backward(x[:2], x, None, torch.ones(4), torch.ones(4), True, False, False),
     "dy has"),
    (lambda x: layernorm.layer_norm_backward(x, x, None, torch.ones(3), torch.ones(4), True, False, False),
     "mean must"),
])
def test_bad_input_raises(bad, match):
    x = torch.randn(4, 6)
    with pytest.raises(ValueError, match=match):
        bad(x)


@pytest.mark.skipif(DEVICE != "cpu", reason="interpreter only")
def test_bfloat16_refused_in_interpreter():
    x = torch.randn(2, 4, 6, dtype=torch.bfloat16)
    for call in (lambda: layernorm.layer_norm(x, (6,)), lambda: layernorm.layer_norm_relu_maxpool(x)):
        with pytest.raises(ValueError, match="interpreter cannot compute"):
            call()


# ----------------------------------------------------------------------------------- launch plans
def _picks() -> int:
    return sum(t.picks for t in runtime.ALL_TUNERS.values())


@pytest.fixture
def fresh_plans(monkeypatch):
    """Empty launch-plan and call-signature caches for this test (the kernels, configs and tuner are
    untouched), so its first call of a shape is the first one of the process."""
    for name in ("_FORWARD_PLANS", "_BACKWARD_PLANS", "_POOL_PLANS", "_CALLS"):
        monkeypatch.setattr(layernorm, name, {}, raising=False)


def test_steady_state_asks_no_tuner(fresh_plans):
    """The first call of a shape finds its kernels' configs through the tuner (forward and backward row
    kernels: one lookup each); repeated calls, training and inference, reuse the launch plans and ask no
    tuner (and the module and the functional form share them)."""
    ln = LayerNorm(40).to(DEVICE)
    x = torch.randn(6, 40, device=DEVICE, requires_grad=True)
    dy = torch.randn(6, 40, device=DEVICE)
    before = _picks()
    ln(x).backward(dy)
    assert _picks() - before == 2  # forward (saving the statistics) and backward
    with torch.no_grad():
        ln(x)
    assert _picks() - before == 3  # the inference forward (no statistics) is another kernel
    before = _picks()
    for _ in range(3):
        ln(x).backward(dy)
        layernorm.layer_norm(x, 40, ln.weight, ln.bias).backward(dy)
        with torch.no_grad():
            ln(x)
            layernorm.layer_norm(x[:5], (40,))  # rows of the same power-of-two bucket, no affine: a new plan ...
    assert _picks() - before == 1        # ... found once
    # a config runs that call's own plan: no tuner, nothing kept
    kept = len(layernorm._FORWARD_PLANS)
    layernorm.layer_norm(x, 40, ln.weight, ln.bias, config=Config({"BLOCK_M": 2}, 4, 1)).backward(dy)
    assert _picks() - before == 1 and len(layernorm._FORWARD_PLANS) == kept


def test_steady_state_long_rows_and_fused_pool_keep_their_plans(fresh_plans):
    """Long rows (segmented kernels, no tuner) and the fused LN -> ReLU -> MaxPool: the first call makes
    the plan, repeated calls use it."""
    D = layernorm.MAX_ROW_D + 16
    x = torch.randn(1, D, device=DEVICE)
    xp, wp, bp = (torch.randn(*s, device=DEVICE) for s in ((2, 4, 9), (4, 9), (4, 9)))
    before = _picks()
    with torch.no_grad():
        y = layernorm.layer_norm(x, D)
        pooled = layernorm.layer_norm_relu_maxpool(xp, wp, bp)
        plans = (len(layernorm._FORWARD_PLANS), len(layernorm._POOL_PLANS))
        assert plans == (1, 1)
        assert torch.equal(layernorm.layer_norm(x, D), y)
        for _ in range(3):
            assert torch.equal(layernorm.layer_norm_relu_maxpool(xp, wp, bp), pooled)
    assert (len(layernorm._FORWARD_PLANS), len(layernorm._POOL_PLANS)) == plans and _picks() == before


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
            y = layernorm.layer_norm_relu_maxpool(x, w, b)
        ref = functional.max_pool1d(
            functional.relu(functional.layer_norm(x.double(), (256, L), w.double(), b.double())), 3, 3)
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


@pytest.mark.gpu
@pytest.mark.parametrize("size", ["tiny", "long"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind,case", [(k, c) for k, cases in LN_CASES.items() for c in cases],
                         ids=lambda v: str(v))
def test_gpu_view_matrix(kind, case, dtype_name, size, isolated):
    isolated("tests.test_layernorm:view_case", case.arg, case.layout, dtype_name, kind, size, None)


@pytest.mark.gpu
@pytest.mark.parametrize("size", ["tiny", "long"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_gpu_pool_view_matrix(case, dtype_name, size, isolated):
    isolated("tests.test_layernorm:pool_view_case", case.arg, case.layout, dtype_name, size, None)


@pytest.mark.gpu
@pytest.mark.parametrize("size", ["tiny", "long"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", DY_CASES, ids=str)
def test_gpu_backward_view_matrix(case, dtype_name, size, isolated):
    backward_view = "tests.test_layernorm:backward_view_case"
    isolated(backward_view, case.layout, dtype_name, size, None)


@pytest.mark.gpu
@pytest.mark.parametrize("path", [None, "long"])
def test_gpu_large_mean_tiny_variance(path):
    for offset, spread in ((1e4, 1e-3), (1e5, 1.0)):
        x = offset + spread * torch.randn(64, 4096, device="cuda")
        ref = functional.layer_norm(x.double(), (4096,))
        err, bound = _errors_vs_torch(layernorm.layer_norm(x, (4096,), config=_config(path, 4096)),
                                      functional.layer_norm(x, (4096,)), ref)
        assert err <= bound, f"{err:.3e} > {bound:.1e}"
