"""Softmax / log-softmax: forward and gradient against float64, row and looped kernels (chosen through
``config=``), odd lengths, huge logits, strided inputs, other dims, the generated view/stride matrix for
x (forward) and for dy / y (the backward launcher), extreme values against torch's own fp32 error,
NaN / inf, empty dims, modules (dim=None as nn.Softmax), errors (CPU interpreter); bf16, large rows,
the view matrix at looped sizes and torch.compile on the GPU."""
import warnings

import pytest
import torch

from models.layers import LogSoftmax, Softmax
from triton_kernels import softmax
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, poison_, rel_err, second_derivatives, tolerance

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, check_case, view_cases

REF = {False: torch.softmax, True: torch.log_softmax}
FN = {False: softmax.softmax, True: softmax.log_softmax}
# kernel paths by config: the row kernels (BLOCK_M rows per program) and the looped kernels with a chunk
# shorter than the test rows, so the online max / sum runs over several chunks
CONFIGS = {"row": Config({"BLOCK_M": 4}, 4, 1), "looped": Config({"BLOCK_N": 32}, 4, 1)}


def _check(x, log, dim=-1, scale=1.0, grad_atol=None, config=None):
    x = x.detach().requires_grad_()
    y = FN[log](x, dim, config=config)
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
def config(request):
    return CONFIGS[request.param]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("M,N", [(1, 1), (5, 3), (9, 17), (4, 1000)])
def test_forward_backward(M, N, dtype, log, config):
    if N > 100 and "BLOCK_N" in config.kwargs:
        config = Config({"BLOCK_N": 256}, 4, 1)  # 4 chunks; a 32-wide chunk would take 32 interpreter steps
    _check(torch.randn(M, N, device=DEVICE, dtype=dtype) * 3, log, config=config)


@pytest.mark.parametrize("log", [False, True])
def test_long_row_picks_looped_kernel(log):
    _check(torch.randn(1, softmax.MAX_FUSED_N + 1, device=DEVICE), log)  # the size-chosen path at its threshold


@pytest.mark.parametrize("log", [False, True])
def test_huge_logits(log, config):
    x = torch.randn(6, 40, device=DEVICE) * 1e4
    _check(x, log, grad_atol=None if log else 1e-6, config=config)


@pytest.mark.parametrize("log", [False, True])
def test_strided_and_other_dims(log, config):
    base = torch.randn(12, 70, device=DEVICE)
    _check(base[::3, 5:60], log, config=config)                       # row stride 210, not contiguous
    _check(torch.randn(40, 9, device=DEVICE).t(), log, config=config)  # column stride 9
    _check(torch.randn(3, 7, 11, device=DEVICE), log, dim=1, config=config)
    _check(torch.randn(2, 3, 5, 19, device=DEVICE), log, dim=-1, config=config)


def test_output_fully_written():
    x = torch.randn(13, 37)
    y = softmax.softmax_forward(x)
    assert torch.isfinite(y).all()
    dx = softmax.softmax_backward(torch.randn(13, 37), y)
    assert torch.isfinite(dx).all()


def test_poisoned_buffers_are_replaced():
    # the launcher allocates its outputs; a NaN-filled input row must give NaN only in that row
    x = torch.randn(4, 10)
    x[2] = poison_(torch.empty(10))
    y = softmax.softmax(x)
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3]]).all()


# ------------------------------------------------------------------------------- view/stride matrix
def _matrix_shape(dim: int, size: str) -> tuple[int, int]:
    """(rows, N) with the reduced dim of length 7 (tiny) or 20000 (> MAX_FUSED_N: the looped kernels
    on the size-chosen path)."""
    n = 7 if size == "tiny" else 20000
    return (5, n) if dim == -1 else (n, 5)


def view_case(arg: str, layout: str, dtype_name: str, log: bool, dim: int, size: str, path: str | None) -> None:
    """(log-)softmax of x laid out as ``layout`` (x may be stride 0 along the other dim), forward and dx
    vs float64. ``path``: "row" / "looped" via config, None for the size-chosen, tuned path."""
    args = {"x": Arg(_matrix_shape(dim, size), broadcast=(1 if dim == 0 else 0,))}
    config = CONFIGS[path] if path else None
    check_case(ViewCase(arg, layout), args, lambda x: FN[log](x, dim, config=config),
               lambda x: REF[log](x, dim), dtype=getattr(torch, dtype_name), device=DEVICE)


def backward_view_case(arg: str, layout: str, dtype_name: str, log: bool, size: str, path: str | None) -> None:
    """The backward launcher with dy or y laid out as ``layout``: dx vs the float64 formula."""
    shape = _matrix_shape(-1, size)
    args = {"dy": Arg(shape, broadcast=(0,), grad=False), "y": Arg(shape, broadcast=(0,), grad=False)}
    config = CONFIGS[path] if path else None

    def ref(dy, y):
        if log:
            return dy - y.exp() * dy.sum(-1, keepdim=True)
        return y * (dy - (dy * y).sum(-1, keepdim=True))

    check_case(ViewCase(arg, layout), args, lambda dy, y: softmax.softmax_backward(dy, y, log, config=config), ref,
               dtype=getattr(torch, dtype_name), device=DEVICE)


X_CASES = view_cases({"x": Arg((5, 7), broadcast=(0,))})
DYY_CASES = view_cases({"dy": Arg((5, 7), broadcast=(0,)), "y": Arg((5, 7), broadcast=(0,))})


@pytest.mark.parametrize("path", ["row", "looped"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("case", X_CASES, ids=str)
def test_view_matrix(case, log, dim, dtype_name, path):
    view_case(case.arg, case.layout, dtype_name, log, dim, "tiny", path)


@pytest.mark.parametrize("path", ["row", "looped"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("case", DYY_CASES, ids=str)
def test_backward_view_matrix(case, log, dtype_name, path):
    backward_view_case(case.arg, case.layout, dtype_name, log, "tiny", path)


# ------------------------------------------------------------------------------- extreme values
def _check_vs_torch(x, log, config, dim=-1):
    """Forward and dx within max(2 x torch's fp32 error, table tolerance) of float64."""
    x = x.detach().requires_grad_()
    y = FN[log](x, dim, config=config)
    x64 = x.detach().double().requires_grad_()
    y64 = REF[log](x64, dim)
    xt = x.detach().requires_grad_()
    yt = REF[log](xt, dim)
    g = torch.randn_like(y)
    for out, grad in ((y, g), (y64, g.double()), (yt, g)):
        out.backward(grad)
    for name, ours, ref, theirs in (("y", y, y64, yt), ("dx", x.grad, x64.grad, xt.grad)):
        bound = max(2 * rel_err(theirs, ref), tolerance(x.dtype))
        err = rel_err(ours, ref)
        assert err <= bound, f"{name}: relative error {err:.3e} > {bound:.1e} (torch fp32: {rel_err(theirs, ref):.3e})"


@pytest.mark.parametrize("offset", [1e4, 1e5])
@pytest.mark.parametrize("log", [False, True])
def test_large_shared_offset(offset, log, config):
    # every row shifted by a large constant (plus a per-row spread): softmax is shift-invariant
    x = torch.randn(6, 45, device=DEVICE) * 3 + offset + torch.randn(6, 1, device=DEVICE) * offset * 0.1
    _check_vs_torch(x, log, config)


@pytest.mark.parametrize("log", [False, True])
def test_extreme_logits(log, config):
    # the fp32 range: entries of +-big and 0 with ties at the top, so probabilities are 1/k (not 0/1);
    # x - max must stay representable, so log-softmax (whose outputs are x - max - log s) uses +-1.5e38
    big = 1.5e38 if log else 3e38
    choice = torch.randint(0, 3, (6, 45), device=DEVICE)
    x = torch.where(choice == 0, big, torch.where(choice == 1, -big, 0.0))
    x[:, 0] = big
    _check_vs_torch(x, log, config)


@pytest.mark.parametrize("log", [False, True])
def test_nan_and_inf_like_torch(log, config):
    """A NaN (or +inf) in a row makes the row NaN, a row of all -inf is NaN; -inf entries among finite
    ones give probability 0 (log-softmax -inf); the other rows are unaffected -- all as torch."""
    x = torch.randn(6, 40, device=DEVICE)
    x[0, 7] = float("nan")
    x[1] = float("-inf")
    x[2, ::3] = float("-inf")
    x[3, 5] = float("inf")
    x[4, 0] = float("-inf")
    y = FN[log](x, -1, config=config)
    ref = REF[log](x, -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(torch.isinf(y), torch.isinf(ref))
    finite = torch.isfinite(ref)
    assert_close(y[finite], ref[finite].double(), torch.float32)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((3, 0), -1), ((0, 5), -1), ((0, 4), 0), ((2, 0, 3), 1), ((2, 3, 0), 1),
                                       ((0,), 0)])
def test_empty_like_torch(shape, dim, log):
    x = torch.randn(shape, device=DEVICE, requires_grad=True)
    y = FN[log](x, dim)
    xt = x.detach().requires_grad_()
    yt = REF[log](xt, dim)
    assert y.shape == yt.shape and y.dtype == yt.dtype
    y.sum().backward()
    yt.sum().backward()
    assert x.grad.shape == xt.grad.shape


# ------------------------------------------------------------------------------- modules
def test_modules_match_torch():
    x = torch.randn(3, 4, 5)
    assert_close(Softmax(dim=1)(x), torch.softmax(x.double(), 1), torch.float32)
    assert_close(LogSoftmax(dim=-1)(x), torch.log_softmax(x.double(), -1), torch.float32)
    assert isinstance(Softmax(dim=1), torch.nn.Softmax) and isinstance(LogSoftmax(), torch.nn.LogSoftmax)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("ours,theirs", [(Softmax, torch.nn.Softmax), (LogSoftmax, torch.nn.LogSoftmax)])
def test_modules_dim_none_as_torch(ndim, ours, theirs):
    """dim=None picks the dim by torch's legacy rule (0 for 1-D and 3-D inputs, else 1), warning as torch."""
    x = torch.randn(*(3, 4, 5, 6)[:ndim], device=DEVICE)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        ref = theirs()(x)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        y = ours()(x)
    assert_close(y, ref.double(), torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # an explicit dim does not warn
        ours(dim=-1)(x)


@pytest.mark.parametrize("bad,match", [
    (lambda: softmax.softmax(torch.randn(3, 4).double()), "x has dtype"),
    (lambda: softmax.softmax(torch.tensor(1.0)), "at least 1 dim"),
    (lambda: softmax.softmax(torch.randn(3, 4), dim=2), "dim must be"),
    (lambda: softmax.log_softmax([1.0, 2.0]), "x must be a torch.Tensor"),
    (lambda: softmax.softmax(torch.randint(0, 3, (3, 4))), "x has dtype"),
    (lambda: softmax.softmax(torch.randn(3, 4, device=DEVICE), config={"BLOCK_N": 32}), "config must be"),
    (lambda: softmax.softmax(torch.randn(3, 4, device=DEVICE), config=Config({"BLOCK_M": 2, "BLOCK_N": 32})),
     "exactly one"),
    (lambda: softmax.softmax(torch.randn(3, 4, device=DEVICE), config=Config({"BLOCK_N": 24})), "power of two"),
    (lambda: softmax.softmax_backward(torch.randn(3, 4), torch.randn(3, 5)), "one shape"),
    (lambda: softmax.softmax_backward(torch.randn(3, 4), torch.randn(3, 4), config=Config({"X": 1})),
     "exactly one"),
])
def test_bad_input_raises(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


@pytest.mark.skipif(DEVICE != "cpu", reason="interpreter only")
@pytest.mark.parametrize("fn", [softmax.softmax, softmax.log_softmax])
def test_bfloat16_refused_in_interpreter(fn):
    with pytest.raises(ValueError, match="interpreter cannot compute"):
        fn(torch.randn(3, 4, dtype=torch.bfloat16))


@pytest.mark.parametrize("shape,dim", [((3, 8), -1), ((4, 2, 3), 0)], ids=["rows", "dim0"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_double_backward_matches_float64(log, shape, dim):
    """create_graph=True: gradients and second derivatives (incoming gradient depending on x too) of three
    calls of one signature -- the first call's and the prepared call's backward -- and of the registered
    op torch.compile traces equal float64 torch's, the three calls bit for bit."""
    x = torch.randn(shape, device=DEVICE)
    out_weight, direction = (torch.randn(shape, device=DEVICE, dtype=torch.float64) for _ in range(2))
    x64 = x.double().requires_grad_()
    reference = second_derivatives(lambda t: REF[log](t, dim), [x64], out_weight, [direction])
    runs = []
    for _ in range(3):
        runs.append(second_derivatives(lambda t: FN[log](t, dim), [x.clone().requires_grad_()], out_weight,
                                       [direction]))
    if dim == -1:  # the registered op (rows)
        runs.append(second_derivatives(lambda t: softmax._softmax_call(t, log, ""), [x.clone().requires_grad_()],
                                       out_weight, [direction]))
    for run, (grads, second) in enumerate(runs):
        assert_close(grads[0], reference[0][0], torch.float32, name=f"run {run}: gradient")
        assert_close(second[0], reference[1][0], torch.float32, name=f"run {run}: second derivative")
        assert torch.equal(second[0], runs[0][1][0]), f"run {run}: differs from the first call"


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
@pytest.mark.parametrize("size", ["tiny", "looped"])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("case", X_CASES, ids=str)
def test_gpu_view_matrix(case, log, dim, dtype_name, size, isolated):
    isolated("tests.test_softmax:view_case", case.arg, case.layout, dtype_name, log, dim, size, None)


@pytest.mark.gpu
@pytest.mark.parametrize("size", ["tiny", "looped"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("case", DYY_CASES, ids=str)
def test_gpu_backward_view_matrix(case, log, dtype_name, size, isolated):
    isolated("tests.test_softmax:backward_view_case", case.arg, case.layout, dtype_name, log, size, None)


@pytest.mark.gpu
def test_gpu_extremes():
    x = torch.randn(64, 3000, device="cuda") * 3 + 1e5
    for log in (False, True):
        for config in (None, Config({"BLOCK_N": 1024}, 4, 1)):
            _check_vs_torch(x, log, config)


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
