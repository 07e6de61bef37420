"""GEMM with fused epilogue: forward, every gradient, odd shapes, strides, errors (CPU interpreter);
bf16, large shapes and torch.compile on the GPU."""
import contextlib

import pytest
import torch

from autotune import spaces
from models.layers import MLP, Linear
from triton_kernels import gemm, gemm_backward, gemm_eager, runtime, stream_buffers
from triton_kernels.testing import assert_close, assert_within_two_roundings, poison_, rel_err

from .conftest import DEVICE, GPU

REF_ACT = {"none": lambda z: z, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
           "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}


def _reference(a, b, bias, res, act, relu_mask=None):
    """float64 reference. relu_mask: which pre-activations the kernel saw as positive. At the ReLU kink a
    pre-activation within rounding of 0 can take either side, and each such flip moves a whole gradient
    entry; so the reference takes the kernel's side there (the forward value is unaffected)."""
    a64, b64 = a.detach().double().cpu().requires_grad_(), b.detach().double().cpu().requires_grad_()
    bias64 = bias.detach().double().cpu().requires_grad_() if bias is not None else None
    res64 = res.detach().double().cpu().requires_grad_() if res is not None else None
    z = a64 @ b64
    if bias64 is not None:
        z = z + bias64
    y = z * relu_mask.cpu() if (act == "relu" and relu_mask is not None) else REF_ACT[act](z)
    if res64 is not None:
        y = y + res64
    return y, (a64, b64, bias64, res64)


def _check(M, N, K, dtype, act, has_bias=True, has_res=False, transpose_a=False, transpose_b=False,
           precision="ieee", device=DEVICE):
    mk = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    a = mk(K, M).t() if transpose_a else mk(M, K)
    b = mk(N, K).t() if transpose_b else mk(K, N)
    bias = mk(N) if has_bias else None
    res = mk(M, N) if has_res else None
    ts = [t for t in (a, b, bias, res) if t is not None]
    for t in ts:
        t.requires_grad_()
    y = gemm.gemm(a, b, bias, res, act, precision)
    mask = None
    if act == "relu":
        with torch.no_grad():
            mask = (gemm.gemm(a, b, bias, None, "none", precision) > 0).double()
    y_ref, leaves = _reference(a, b, bias, res, act, mask)
    tf32 = precision == "tf32" and GPU
    # Triton's tf32 operand conversion truncates (cuBLAS rounds): on 4096^3 we measured 7.8e-4 vs cuBLAS's
    # 2.9e-4 relative error, so the tf32 entry of the table gets a 3x allowance here.
    scale = 3.0 if tf32 else 1.0
    assert_close(y, y_ref, dtype, tf32=tf32, name="C", scale=scale)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g.double().cpu())
    for name, t, r in zip(("dA", "dB", "dbias", "dresidual"), (a, b, bias, res), leaves):
        if t is not None:
            assert_close(t.grad, r.grad, dtype, tf32=tf32, name=name, scale=scale)


DTYPES_CPU = [torch.float32, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES_CPU)
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (17, 3, 5), (33, 40, 70), (64, 64, 64)])
def test_forward_backward(M, N, K, dtype, act):
    _check(M, N, K, dtype, act, has_bias=True)


@pytest.mark.parametrize("M,act,dtype", [(gemm._ACT_COLUMNS_MAX_M, "relu", torch.float16),
                                         (gemm._ACT_COLUMNS_MAX_M + 77, "relu", torch.float16),
                                         (gemm._ACT_COLUMNS_MAX_M + 77, "gelu", torch.float32),
                                         (gemm._ACT_COLUMNS_MAX_M, "none", torch.float32)])
def test_bias_gradient_in_both_column_sum_paths(M, act, dtype):
    """dbias from the activation-backward pass: up to _ACT_COLUMNS_MAX_M rows one program per column block
    sums all rows and stores in the bias dtype; above, each tile's column sums go to fp32 partials that the
    last program of each column block adds in a fixed order, leaving the stream's arrival counters at zero."""
    _check(M, 5, 3, dtype, act, has_bias=True)
    x = torch.randn(M, 3, dtype=dtype, requires_grad=True)
    lin = Linear(3, 5, activation=act).to(dtype)
    lin(x).sum().backward()
    assert lin.bias.grad.dtype == dtype
    for buf in stream_buffers._COUNTERS.values():
        assert int(buf.count_nonzero()) == 0


@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_residual_and_no_bias(act):
    _check(19, 23, 31, torch.float32, act, has_bias=False, has_res=True)
    _check(19, 23, 31, torch.float32, act, has_bias=True, has_res=True)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_transposed_views(ta, tb):
    _check(21, 34, 45, torch.float32, "gelu", transpose_a=ta, transpose_b=tb)


def test_strided_slices():
    a = torch.randn(40, 90)[::2, 5:50]  # row stride 180, not contiguous
    b = torch.randn(45, 60)[:, ::3]     # column stride 3
    y = gemm.gemm(a, b, activation="relu")
    assert_close(y, torch.relu(a.double() @ b.double()), torch.float32)


def test_output_fully_written():
    a, b = torch.randn(37, 29), torch.randn(29, 41)
    out = poison_(torch.empty(37, 41))
    c, _ = gemm.gemm_forward(a, b, out=out)
    assert c.data_ptr() == out.data_ptr()
    assert torch.isfinite(out).all()
    assert_close(out, a.double() @ b.double(), torch.float32)


def test_empty_k_gives_bias():
    a, b, bias = torch.randn(5, 0), torch.randn(0, 7), torch.randn(7)
    y = gemm.gemm(a, b, bias, activation="relu")
    assert torch.equal(y, torch.relu(bias).expand(5, 7))


def test_linear_module_matches_nn_and_state_dict():
    lin = Linear(13, 7, activation="gelu")
    ref = torch.nn.Linear(13, 7)
    ref.load_state_dict(lin.state_dict())
    lin2 = Linear(13, 7, activation="gelu")
    lin2.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 13)
    expect = torch.nn.functional.gelu(ref(x.double().float()))
    assert_close(lin(x), expect.double(), torch.float32)
    assert_close(lin2(x), expect.double(), torch.float32)
    assert "activation=gelu" in repr(lin)


@pytest.mark.parametrize("dtype", DTYPES_CPU)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_linear_gelu_forms_match_torch(approximate, dtype):
    """Linear(activation="gelu" | "gelu_tanh") is functional.gelu(approximate="none" | "tanh") of the
    float64 linear, forward and the gradients of x, weight and bias (with a residual: dresidual too).
    The two forms differ by ~2e-4 here (at most ~5e-4 anywhere), in fp32 far more than the kernel's
    error: each is told apart."""
    torch.manual_seed(0)
    lin = Linear(24, 20, activation="gelu" if approximate == "none" else "gelu_tanh", dtype=dtype)
    x = torch.randn(2, 9, 24, dtype=dtype, requires_grad=True)
    res = torch.randn(2, 9, 20, dtype=dtype, requires_grad=True)
    leaves = [t.detach().double().requires_grad_() for t in (x, lin.weight, lin.bias, res)]
    z = torch.nn.functional.linear(*leaves[:3])
    y_ref = torch.nn.functional.gelu(z, approximate=approximate) + leaves[3]
    other = torch.nn.functional.gelu(z, approximate="tanh" if approximate == "none" else "none") + leaves[3]
    y = lin(x, res)
    assert_close(y, y_ref, dtype)
    if dtype == torch.float32:  # fp16 rounding (~5e-4 relative) is as large as the difference
        assert (other - y_ref).abs().max() > 100 * (y.double() - y_ref).abs().max()
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g.double())
    for name, t, r in zip(("dx", "dweight", "dbias", "dresidual"), (x, lin.weight, lin.bias, res), leaves):
        assert_close(t.grad, r.grad, dtype, name=name)


def test_op_suite_residual_case_checks_every_gradient():
    """The op suite's residual case (bench.cases.gemm, ``residual=True``): eager's act(linear) + r and ours
    (r in the epilogue) against its float64 reference, forward and the gradients of x, W, b and r."""
    from bench.cases.gemm import linear_case

    case = linear_case(16, 24, 8, torch.float32, "relu", backward=True, residual=True)
    assert case.name == "linear_relu_residual_fwdbwd"
    args = case.inputs(0, torch.device(DEVICE))
    ref = case.reference(*args)
    assert len(args) == 5 and len(ref) == 5  # x, W, b, r and dy; y and four gradients
    for backend in ("eager", "triton"):
        for name, out, r in zip(("y", "dx", "dweight", "dbias", "dresidual"), case.fns[backend](*args), ref):
            assert_close(out, r, torch.float32, name=f"{backend} {name}")


def test_mlp_trains():
    torch.manual_seed(0)
    net = MLP([6, 16, 1])
    x, y = torch.randn(64, 6), torch.randn(64, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]


def _like(t, *shape):
    return torch.randn(*shape, device=t.device)


@pytest.mark.parametrize("bad,match", [
    (lambda a, b: gemm.gemm(a, _like(a, 7, 3)), "a.shape\\[1\\] must equal"),
    (lambda a, b: gemm.gemm(a.double(), b), "a has dtype"),
    (lambda a, b: gemm.gemm(a, b.half()), "b has dtype"),
    (lambda a, b: gemm.gemm(a, b, bias=_like(a, 3)), "bias has 3 elements"),
    (lambda a, b: gemm.gemm(a, b, residual=_like(a, 4, 3)), "residual has shape"),
    (lambda a, b: gemm.gemm(a, b, activation="tanh"), "activation must be"),
    (lambda a, b: gemm.gemm(a, b, precision="fp8"), "precision must be"),
    (lambda a, b: gemm.gemm(a[0], b), "a must have 2 dims"),
    (lambda a, b: gemm.gemm(a, b.to("meta")), "b is on meta"),
    (lambda a, b: Linear(5, 3, activation="tanh"), "activation must be"),
    (lambda a, b: gemm.linear(_like(a, 2, 4), _like(a, 3, 5)), "x has 4 features"),
    # linear's errors name its own arguments (x / weight / bias / residual), not gemm's a / b
    (lambda a, b: gemm.linear(a.double(), b.t()), "x has dtype torch.float64"),
    (lambda a, b: gemm.linear(a, b.t().half()), "weight has dtype torch.float16 but x has torch.float32"),
    (lambda a, b: gemm.linear(a, b.t(), bias=_like(a, 4)), "bias has 4 elements"),
    (lambda a, b: gemm.linear(a, b.t(), bias=_like(a, 6).double()), "bias has dtype"),
    (lambda a, b: gemm.linear(a, b.t(), residual=_like(a, 4, 5)), "residual has shape \\(4, 5\\), expected"),
    (lambda a, b: gemm.linear(a, b.t()[None]), "weight must have 2 dims"),
    (lambda a, b: gemm.linear(a, b.t(), residual=[1.0]), "residual must be a torch.Tensor"),
])
def test_bad_input_raises_before_launch(bad, match):
    a, b = torch.randn(4, 5, device=DEVICE), torch.randn(5, 6, device=DEVICE)  # a GPU box meets the checks too
    with pytest.raises(ValueError, match=match):
        bad(a, b)


# ----------------------------------------------------------------------------------- launch plans
def _picks() -> int:
    return sum(t.picks for t in runtime.ALL_TUNERS.values())


def test_steady_state_asks_no_tuner(monkeypatch):
    """The first call of a GEMM shape finds its config through the tuner (one lookup per GEMM: forward,
    and the fused backward or dA and dB); repeated calls, training and inference, reuse the launch plans and
    ask no tuner."""
    monkeypatch.setattr(gemm, "_PLANS", {}, raising=False)  # empty plan caches: this test's calls come first
    monkeypatch.setattr(gemm_backward, "_PLANS", {}, raising=False)
    relu, gelu = Linear(12, 8, activation="relu").to(DEVICE), Linear(12, 8, activation="gelu").to(DEVICE)
    x = torch.randn(5, 12, device=DEVICE, requires_grad=True)
    g = torch.randn(5, 8, device=DEVICE)
    before = _picks()
    relu(x).backward(g)
    assert _picks() - before == 2  # forward, the fused backward (gemm_backward.py)
    before = _picks()
    gelu(x).backward(g)            # gelu saves its pre-activation: another forward kernel; dA = dZ @ W, dW^T
    assert _picks() - before == 3
    before = _picks()
    for _ in range(3):
        relu(x).backward(g)
        gelu(x).backward(g)
        with torch.no_grad():
            relu(x)
            gemm.gemm(x, relu.weight.t(), relu.bias, None, "relu")
            gelu(x)                # no gradient: nothing saved, another forward kernel ...
    assert _picks() - before == 1  # ... found once
    # a config runs that call's own plan: no tuner, nothing kept
    kept = len(gemm._PLANS)
    gemm.gemm_forward(x.detach(), relu.weight.detach().t(), config=gemm.INTERPRET_CONFIG)
    assert _picks() - before == 1 and len(gemm._PLANS) == kept


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype,precision", [(torch.bfloat16, "ieee"), (torch.float16, "ieee"),
                                             (torch.float32, "tf32"), (torch.float32, "ieee")])
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_gpu_large_and_odd(dtype, precision, act):
    _check(1000, 513, 777, dtype, act, has_bias=True, has_res=True, precision=precision, device="cuda")
    _check(2048, 1024, 4096, dtype, act, precision=precision, device="cuda", transpose_b=True)
    _check(129, 3, 8, dtype, act, precision=precision, device="cuda", transpose_a=True)


@pytest.mark.gpu
def test_gpu_non_contiguous():
    a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)[::2, ::2]
    b = torch.randn(1024, 300, device="cuda", dtype=torch.bfloat16)[::2]
    y = gemm.gemm(a, b, activation="relu")
    assert_close(y, torch.relu(a.double() @ b.double()), torch.bfloat16)


@pytest.mark.gpu
def test_gpu_compile_fullgraph_mlp():
    torch._dynamo.reset()
    net = MLP([256, 512, 512, 10], activation="relu").cuda()
    x = torch.randn(64, 256, device="cuda")
    compiled = torch.compile(net, fullgraph=True)
    y = compiled(x)
    ref = net(x)
    assert_close(y, ref.double(), torch.float32)
    y.sum().backward()
    for p in net.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    explain = torch._dynamo.explain(net)(x)
    assert explain.graph_break_count == 0


@pytest.mark.gpu
def test_gpu_autotune_persists(tmp_path, monkeypatch):
    """Tuning a key times the candidates, stores them under a readable key, and a fresh process (no
    tuner memory, no launch plans) reads them back."""
    monkeypatch.setenv(runtime.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(runtime.TUNE_ENV, "1")
    monkeypatch.setattr(gemm, "_PLANS", {})
    gemm._tuner.clear_memory()
    a = torch.randn(300, 200, device="cuda", dtype=torch.float16)
    b = torch.randn(200, 100, device="cuda", dtype=torch.float16)
    assert_close(gemm.gemm(a, b), a.double() @ b.double(), torch.float16)
    assert gemm._tuner.events[-1][1] == "tuned"
    (entry,) = runtime.read_json(gemm._tuner.cache_path()).values()
    assert len(entry["trials"]) >= 2 and entry["best_ms"] > 0
    assert entry["key"]["dtype"] == "float16" and entry["key"]["m"] == 512
    gemm._tuner.clear_memory()
    monkeypatch.setattr(gemm, "_PLANS", {})
    gemm.gemm(a, b)
    assert gemm._tuner.events[-1][1] == "hit"


@pytest.mark.gpu
def test_gpu_tma_kernel_in_autograd_backward_thread():
    """autograd runs the backward of CUDA tensors in a thread of its own, which inherits none of the main
    thread's Triton context variables: a TMA launch there (after one in the main thread) runs right."""
    tma = gemm.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "TMA": 1}, 8, 3)
    a = torch.randn(256, 64, device="cuda")
    b = torch.randn(64, 192, device="cuda")
    ref = a.double() @ b.double()
    assert_close(gemm.gemm_forward(a, b, config=tma)[0], ref, torch.float32)  # main thread first
    out = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            out.append(gemm.gemm_forward(a, b, config=tma)[0])  # runs in autograd's device thread
            return grad

    Probe.apply(torch.randn(4, device="cuda", requires_grad=True)).sum().backward()
    assert_close(out[0], ref, torch.float32)


@pytest.mark.parametrize("kernel", ["pointer", "split_k"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_int64_index_path(kernel, ta, tb):
    """The wide-index variant (used when offsets pass 2**31), chosen by argument, computes the same
    result in every operand layout (the backward's dA and dB GEMMs read transposed views)."""
    M, N, K = 23, 19, 70
    a = torch.randn(K, M, device=DEVICE).t() if ta else torch.randn(M, K, device=DEVICE)
    b = torch.randn(N, K, device=DEVICE).t() if tb else torch.randn(K, N, device=DEVICE)
    bias, res = torch.randn(N, device=DEVICE), torch.randn(M, N, device=DEVICE)
    config = {"pointer": gemm.INTERPRET_CONFIG, "split_k": SPLITK_SMALL}[kernel]
    c, z = gemm.gemm_forward(a, b, bias, res, "gelu", save_preact=True, config=config, index_64=True,
                             out=poison_(torch.empty(M, N, device=DEVICE)))
    zref = a.double() @ b.double() + bias.double()
    assert_close(z, zref, torch.float32, name="Z")
    assert_close(c, REF_ACT["gelu"](zref) + res.double(), torch.float32)


TMA_SMALL = gemm.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "TMA": 1}, 4, 1)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh"])
def test_persistent_tma_kernel(ta, tb, act):
    """The persistent TMA kernel (chosen by the tuner on Hopper) in all four operand layouts, with
    partial edge tiles and more tiles than programs."""
    M, N, K = 100, 72, 48
    a = torch.randn(K, M).t() if ta else torch.randn(M, K)
    b = torch.randn(N, K).t() if tb else torch.randn(K, N)
    bias, res = torch.randn(N), torch.randn(M, N)
    assert gemm.tma_layout(a) == (ta, M if ta else K) and gemm.tma_layout(b) == (tb, K if tb else N)
    out = poison_(torch.empty(M, N))
    c, z = gemm.gemm_forward(a, b, bias, res, act, save_preact=True, out=out, config=TMA_SMALL)
    zref = a.double() @ b.double() + bias.double()
    assert_close(z, zref, torch.float32, name="Z")
    assert_close(c, REF_ACT[act](zref) + res.double(), torch.float32)


def test_tma_layout_rejects_unaligned():
    assert gemm.tma_layout(torch.randn(10, 7)) is None            # 28-byte rows
    assert gemm.tma_layout(torch.randn(10, 8)[:, ::2]) is None     # no unit stride
    assert gemm.tma_layout(torch.randn(10, 8)) == (False, 8)


@pytest.mark.parametrize("tb", [False, True])
def test_tma_kernel_on_relaid_out_copy_of_b(tb):
    """The candidates that copy B into the other layout before the TMA kernel."""
    cfg = gemm.Config({**TMA_SMALL.kwargs, "B_RELAYOUT": 1}, 4, 1)
    a, bias = torch.randn(70, 36), torch.randn(44)
    b = torch.randn(44, 36).t() if tb else torch.randn(36, 44)
    c, _ = gemm.gemm_forward(a, b, bias, activation="gelu", out=poison_(torch.empty(70, 44)), config=cfg)
    assert_close(c, REF_ACT["gelu"](a.double() @ b.double() + bias.double()), torch.float32)


@pytest.mark.parametrize("layout", ["n_major", "k_major", "strided"])
def test_relayout_copies_b_into_the_other_layout(layout):
    """relayout keeps the matrix and swaps its storage order (odd sizes: partial edge tiles)."""
    base = torch.randn(150, 133)
    b = {"n_major": base, "k_major": base.t().contiguous().t(), "strided": torch.randn(150, 266)[:, ::2]}[layout]
    out = gemm.relayout(b)
    assert torch.equal(out, b)
    assert out.stride(0) == 1 if b.stride(1) == 1 else out.stride(1) == 1


WIDE_TILES = {"pointer": gemm.Config({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 1}, 4, 1),
              "tma": gemm.Config({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 1}, 4, 1)}


@pytest.mark.parametrize("kernel", ["pointer", "tma"])
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_wide_tile_epilogue_in_column_halves(kernel, act):
    """Tiles 128 or more columns wide (`_epilogue_tile`: two column halves with the erf GELU, one pass
    otherwise): bias, saved Z, activation and residual land in the right columns, with N = 200 making
    the second tile's right half partly (192..199) and its left half wholly inside C."""
    M, N, K = 37, 200, 40
    a, b = torch.randn(M, K), torch.randn(N, K).t()  # B as nn.Linear's weight
    bias, res = torch.randn(N), torch.randn(M, N)
    c, z = gemm.gemm_forward(a, b, bias, res, act, save_preact=True, out=poison_(torch.empty(M, N)),
                             config=WIDE_TILES[kernel])
    zref = a.double() @ b.double() + bias.double()
    assert_close(z, zref, torch.float32, name="Z")
    assert_close(c, REF_ACT[act](zref) + res.double(), torch.float32)


SPLITK_SMALL = gemm.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "SPLIT_K": 4}, 4, 1)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
@pytest.mark.parametrize("K", [200, 64, 31])
def test_split_k(ta, tb, act, K):
    """Split-K (the tuner's candidates for few output tiles and a long K): K slices of whole BLOCK_K steps,
    partials added in a fixed order, then the same epilogue (bias, Z, activation, residual). K = 64 gives
    two slices instead of four, K = 31 one: a shape shorter than its tuning bucket."""
    M, N = 45, 70
    a = torch.randn(K, M).t() if ta else torch.randn(M, K)
    b = torch.randn(N, K).t() if tb else torch.randn(K, N)
    bias, res = torch.randn(N), torch.randn(M, N)
    c, z = gemm.gemm_forward(a, b, bias, res, act, save_preact=True, out=poison_(torch.empty(M, N)),
                             config=SPLITK_SMALL)
    zref = a.double() @ b.double() + bias.double()
    assert_close(z, zref, torch.float32, name="Z")
    assert_close(c, REF_ACT[act](zref) + res.double(), torch.float32)


def test_split_k_is_offered_only_for_few_tiles_and_long_k():
    def splits(M, N, K):
        return [c for c in spaces.candidates("gemm", M=M, N=N, K=K, dtype="bfloat16") if "SPLIT_K" in c.kwargs]

    assert splits(512, 1024, 8704)                      # the Char-CNN FC: 32 tiles of 128 x 128
    assert not splits(4096, 1024, 8704)                 # 256 tiles: enough programs already
    assert not splits(512, 1024, 512)                   # short K
    assert all(8704 >= 2 * c.kwargs["SPLIT_K"] * c.kwargs["BLOCK_K"] for c in splits(512, 1024, 8704))


F64_SMALL = gemm.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "F64": 1}, 4, 1)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
@pytest.mark.parametrize("K", [200, 31])
def test_f64_accumulation(ta, tb, act, K):
    """The fp64-accumulating pointer kernel (F64=1: the tuner's fp32 "ieee" candidates on Hopper), forced: Z within
    two fp32 roundings of float64, then the same epilogue (activation, residual) as the fp32 kernels."""
    M, N = 45, 70
    a = torch.randn(K, M).t() if ta else torch.randn(M, K)
    b = torch.randn(N, K).t() if tb else torch.randn(K, N)
    bias, res = torch.randn(N), torch.randn(M, N)
    c, z = gemm.gemm_forward(a, b, bias, res, act, save_preact=True, out=poison_(torch.empty(M, N)), config=F64_SMALL)
    assert_within_two_roundings(z, a, b, bias)
    assert_close(c, REF_ACT[act](a.double() @ b.double() + bias.double()) + res.double(), torch.float32)


def test_f64_config_is_refused_where_it_cannot_run():
    """F64=1 runs fp32 operands in precision "ieee" on the pointer kernel only; anything else is refused by name
    before a launch. The tuner offers it on Hopper alone (f64_eligible), never in the interpreter."""
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    for call in (lambda: gemm.gemm_forward(a, b, precision="tf32", config=F64_SMALL),
                 lambda: gemm.gemm_forward(a.half(), b.half(), config=F64_SMALL),
                 lambda: gemm.gemm_forward(a, b, config=gemm.Config({**F64_SMALL.kwargs, "SPLIT_K": 2}, 4, 1)),
                 lambda: gemm.gemm_forward(a, b, config=gemm.Config({**F64_SMALL.kwargs, "TMA": 1}, 4, 1))):
        with pytest.raises(ValueError, match="F64"):
            call()
    assert not gemm.f64_eligible(a.to(DEVICE), "tf32") and not gemm.f64_eligible(a.to(DEVICE).half(), "ieee")
    if not GPU:
        assert not gemm.f64_eligible(a, "ieee")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", spaces.GEMM_SPLITK_CONFIGS,
                         ids=lambda c: "x".join(str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K")))
def test_gpu_split_k_study_shape(cfg):
    """Every split-K candidate at the Char-CNN FC shape (512 x 8704 -> 1024, bf16, nn.Linear's weight
    layout), with bias and ReLU, against float64."""
    x = torch.randn(512, 8704, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 8704, device="cuda", dtype=torch.bfloat16) / 8704 ** 0.5
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    c, _ = gemm.gemm_forward(x, w.t(), bias, activation="relu", out=poison_(torch.empty(512, 1024, device="cuda",
                             dtype=torch.bfloat16)), config=cfg)
    assert_close(c, torch.relu(x.double() @ w.double().t() + bias.double()), torch.bfloat16)


def _tile_id(c) -> str:
    return "x".join(str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f"w{c.num_warps}s{c.num_stages}"


@pytest.mark.gpu
@pytest.mark.parametrize("b_kmajor", [False, True], ids=["b_nmajor", "b_kmajor"])
@pytest.mark.parametrize("cfg", spaces.GEMM_TMA_CONFIGS, ids=_tile_id)
def test_gpu_every_tma_tile_on_an_odd_shape(cfg, b_kmajor):
    """Every 16-bit tile of the persistent TMA kernel, forced, on a shape no tile divides (M, N and K each end in a
    partial tile; rows still 16-byte aligned, as TMA needs), with bias, ReLU and residual, against float64. The
    16-warp tile, kept for the erf GELU epilogue, runs that epilogue: with any other (whose loop Triton flattens
    into the next tile's) it needs 262 KB of shared memory, more than an SM has, and the tuner skips it."""
    M, N, K = 1000, 520, 776
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if b_kmajor
         else torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) / K ** 0.5
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    act = "gelu" if cfg.num_warps == 16 else "relu"
    c, _ = gemm.gemm_forward(a, b, bias, res, activation=act, config=cfg,
                             out=poison_(torch.empty(M, N, device="cuda", dtype=torch.bfloat16)))
    ref = REF_ACT[act](a.double() @ b.double() + bias.double()) + res.double()
    assert_close(c, ref, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("b_kmajor", [False, True], ids=["b_nmajor", "b_kmajor"])
@pytest.mark.parametrize("cfg", spaces.GEMM_F64_CONFIGS, ids=_tile_id)
def test_gpu_every_f64_tile_on_an_odd_shape(cfg, b_kmajor):
    """Every tile of the fp64-accumulating kernel, forced, on fp32 operands no tile divides (B also as nn.Linear's
    weight), with bias, GELU and residual: Z within two fp32 roundings of float64. On Hopper the tuner offers them
    for fp32 "ieee" (f64_eligible)."""
    M, N, K = 1000, 777, 1500
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(N, K, device="cuda").t() if b_kmajor else torch.randn(K, N, device="cuda")
    bias, res = torch.randn(N, device="cuda"), torch.randn(M, N, device="cuda")
    c, z = gemm.gemm_forward(a, b, bias, res, "gelu", save_preact=True, config=cfg,
                             out=poison_(torch.empty(M, N, device="cuda")))
    assert_within_two_roundings(z, a, b, bias)
    assert_close(c, REF_ACT["gelu"](z.double()) + res.double(), torch.float32)
    hopper = torch.cuda.get_device_capability()[0] == 9
    assert gemm.f64_eligible(a, "ieee") == hopper and not gemm.f64_eligible(a, "tf32")


def test_tf32x3_precision_is_accepted_everywhere():
    """precision="tf32x3" (three tf32 products) through gemm, linear and the Linear module, forward and
    backward, against float64 (the interpreter's dot is exact fp32; the GPU test below checks accuracy)."""
    a = torch.randn(33, 40, device=DEVICE, requires_grad=True)
    b = torch.randn(40, 17, device=DEVICE, requires_grad=True)
    c = gemm.gemm(a, b, activation="relu", precision="tf32x3")
    assert_close(c, torch.relu(a.double() @ b.double()), torch.float32)
    c.sum().backward()
    assert a.grad is not None and b.grad is not None
    layer = Linear(40, 17, precision="tf32x3").to(DEVICE)
    assert_close(layer(a.detach()), a.detach().double() @ layer.weight.double().t() + layer.bias.double(),
                 torch.float32)


@contextlib.contextmanager
def _matmul_precision(value: str):
    """torch.set_float32_matmul_precision(value) for the block, then back."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def test_default_precision_is_torchs_matmul_precision():
    """precision=None (the default of gemm, linear and the Linear module) runs what torch's own matmul runs,
    read at each call: "ieee" by default, "tf32" for fp32 after set_float32_matmul_precision("high" or
    "medium"), "ieee" (tensor cores) for 16-bit inputs."""
    x = torch.randn(9, 24, device=DEVICE)
    assert runtime.torch_matmul_precision(x) == "ieee"
    for value in ("high", "medium"):
        with _matmul_precision(value):
            assert runtime.torch_matmul_precision(x) == "tf32"
            assert runtime.torch_matmul_precision(x.half()) == "ieee"
    assert runtime.torch_matmul_precision(x) == "ieee"
    layer = Linear(24, 16).to(DEVICE)
    assert layer.precision is None
    with _matmul_precision("high"), torch.no_grad():  # a tf32 call signature, remembered for the fast path
        y = layer(x)
        assert gemm_eager.lookup("linear", x, layer.weight, layer.bias, None, "none", "tf32", None)[1]
        assert gemm_eager.lookup("gemm", x, layer.weight.t(), None, None, "none", "tf32", None)[1] is None
        gemm.gemm(x, layer.weight.t())
        assert gemm_eager.lookup("gemm", x, layer.weight.t(), None, None, "none", "tf32", None)[1]
    assert_close(y, x.double() @ layer.weight.double().t() + layer.bias.double(), torch.float32, tf32=GPU)
    with pytest.raises(ValueError, match="precision"):
        Linear(24, 16, precision="fp32")


@pytest.mark.gpu
def test_gpu_default_precision_follows_torch_eager_and_compiled():
    """On the GPU, where tf32 differs from ieee: precision=None gives the tf32 result after
    set_float32_matmul_precision("high") and the ieee one before, as an eager call and under torch.compile
    (which recompiles when the setting changes)."""
    x = torch.randn(512, 1024, device="cuda")
    w = torch.randn(256, 1024, device="cuda")
    by_precision = {p: gemm.linear(x, w, precision=p) for p in ("ieee", "tf32")}
    assert not torch.equal(by_precision["ieee"], by_precision["tf32"])
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: gemm.linear(x, w), fullgraph=True)
    for value, precision in (("highest", "ieee"), ("high", "tf32"), ("highest", "ieee")):
        with _matmul_precision(value):
            assert torch.equal(gemm.linear(x, w), by_precision[precision]), value
            assert torch.equal(compiled(x, w), by_precision[precision]), value


@pytest.mark.gpu
def test_gpu_linear_under_autocast_compiled():
    """The Linear module under bf16 autocast, compiled (fullgraph): bf16 output equal to nn.Linear's to bf16
    rounding, fp32 gradients for x and the fp32 weight."""
    torch._dynamo.reset()
    layer = Linear(1024, 512, activation="relu").cuda()
    x = torch.randn(256, 1024, device="cuda", requires_grad=True)
    compiled = torch.compile(lambda x: layer(x), fullgraph=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = compiled(x)
        want = torch.relu(torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert y.dtype == want.dtype == torch.bfloat16
    cast = [t.detach().bfloat16().double() for t in (x, layer.weight, layer.bias)]
    assert_close(y, torch.relu(cast[0] @ cast[1].t() + cast[2]), torch.bfloat16)
    y.float().square().sum().backward()
    assert x.grad.dtype == layer.weight.grad.dtype == layer.bias.grad.dtype == torch.float32


@pytest.mark.gpu
def test_gpu_tf32x3_is_as_accurate_as_fp32():
    """On the tensor cores tf32x3 comes within fp32's error of float64, where tf32 is ~1e-3 off."""
    a = torch.randn(1024, 2048, device="cuda")
    b = torch.randn(2048, 512, device="cuda")
    ref = a.double() @ b.double()
    err = {p: rel_err(gemm.gemm(a, b, precision=p), ref) for p in ("ieee", "tf32", "tf32x3")}
    assert err["tf32x3"] <= max(4 * err["ieee"], 2e-6) and err["tf32"] > 10 * err["tf32x3"], err
