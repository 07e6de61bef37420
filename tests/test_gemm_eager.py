"""The GEMM's eager fast path (triton_kernels/gemm_eager.py): a repeated call signature of linear / gemm runs
its prepared call, whose output and every gradient equal the general path's bit for bit (the same plans,
kernels and formulas) and float64's within the tolerance table; a new signature, bad input and unusual calls
take the general path. Which path ran is read off the prepared call (gemm_eager.lookup) and the output's
autograd node, never by patching the modules."""
import pytest
import torch
from torch.nn import functional

from models.layers import Linear
from triton_kernels import gemm, gemm_eager, runtime
from triton_kernels.testing import assert_close, second_derivatives

from .conftest import DEVICE, GPU
from .test_gemm import REF_ACT, SPLITK_SMALL, TMA_SMALL, _reference

DTYPES_CPU = [torch.float32, torch.float16]
FAST_NODE = "_NodeBackward"  # the autograd node of a prepared call (gemm_eager._Node)


def _prepared(op, a, b, bias=None, residual=None, activation="none", precision="ieee", config=None):
    """The prepared call kept for this signature, or None."""
    return gemm_eager.lookup(op, a, b, bias, residual, activation, precision, config)[1]


def _three_calls(fn, leaves, grad_out):
    """[(y, grads)] of three calls of fn's signature against the same dY: the first takes the general path,
    the second its prepared call's first run (which finds the plans and fixes the launches, launching them
    the general way), the third the fixed launches; grads of the leaves that require one, in order."""
    wanted = [t for t in leaves if t is not None and t.requires_grad]
    runs = []
    for _ in range(3):
        y = fn()
        runs.append((y, torch.autograd.grad(y, wanted, grad_out) if wanted else ()))
    return runs


def _assert_same(runs, dtype, exact=True):
    """Every call's output and gradients equal the first's: bit for bit, or (``exact`` False: sums whose
    order varies, as atomics on a GPU) within the dtype's tolerance."""
    y1, grads1 = runs[0]
    for call, (y, grads) in enumerate(runs[1:], 2):
        assert torch.equal(y, y1), f"forward: call {call} differs from the general path"
        for i, (g1, g) in enumerate(zip(grads1, grads)):
            assert g.stride() == g1.stride(), f"call {call}: gradient {i} in another layout"
            if exact:
                assert torch.equal(g, g1), f"call {call}: gradient {i} differs"
            else:
                assert_close(g, g1.double(), dtype, name=f"call {call}: gradient {i}")


def _check(op, a, b, bias, residual, act, dtype, config=None, exact=True):
    """``op`` ("linear": b is the (N, K) weight; "gemm": b is B (K, N)) through its general and prepared calls
    (see _three_calls): they agree bit for bit (``exact``, see _assert_same) and match float64, forward and
    every gradient."""
    names = ("dx", "dweight") if op == "linear" else ("da", "db")
    weight_t = b.t() if op == "linear" else b
    out_shape = (*a.shape[:-1], weight_t.shape[1])
    grad_out = torch.randn(out_shape, device=a.device, dtype=dtype)

    def call():
        if op == "linear":
            return gemm.linear(a, b, bias, act, residual, config=config)
        return gemm.gemm(a, b, bias, residual, act, config=config)

    assert _prepared(op, a, b, bias, residual, act, config=config) is None, "a signature seen before: other shapes"
    runs = _three_calls(call, (a, b, bias, residual), grad_out)
    _assert_same(runs, dtype, exact)
    y, grads = runs[2]
    if any(t is not None and t.requires_grad for t in (a, b, bias, residual)) and a.ndim == 2:
        assert type(y.grad_fn).__name__ == FAST_NODE
    a2 = a.reshape(-1, a.shape[-1])
    r2 = residual.reshape(-1, residual.shape[-1]) if residual is not None else None
    mask = None
    if act == "relu":  # at the kink, the side the kernel's pre-activation took
        with torch.no_grad():
            mask = (gemm.gemm_forward(a2, weight_t, bias, config=config)[0] > 0).double()
    y_ref, leaves64 = _reference(a2, weight_t, bias, r2, act, mask)
    assert_close(y.reshape(y_ref.shape), y_ref, dtype, name="y")
    wanted = [(name, t, ref) for name, t, ref in zip((*names, "dbias", "dresidual"), (a, b, bias, residual), leaves64)
              if t is not None and t.requires_grad]
    if wanted:
        refs = torch.autograd.grad(y_ref, [ref for _, _, ref in wanted], grad_out.double().cpu().reshape(y_ref.shape))
        for (name, t, _), g, ref in zip(wanted, grads, refs):
            ref = ref.t() if name == "dweight" else ref
            assert_close(g, ref.reshape(t.shape), dtype, name=name)
    return runs


def _leaf(*shape, dtype=torch.float32, grad=True):
    return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_(grad)


# ------------------------------------------------------------------------------------------ equality
@pytest.mark.parametrize("dtype", DTYPES_CPU)
@pytest.mark.parametrize("has_bias", [True, False])
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_linear_prepared_call_equals_general_path_and_float64(act, has_bias, dtype):
    x, weight = _leaf(19, 24, dtype=dtype), _leaf(13, 24, dtype=dtype)
    bias = _leaf(13, dtype=dtype) if has_bias else None
    grads = _check("linear", x, weight, bias, None, act, dtype)[2][1]
    assert grads[1].stride() == weight.stride()  # dW written in the weight's layout: nothing for autograd to copy


@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_residual_and_batched_input(act):
    """x of shape (..., K) and a residual of the output's shape (reshaped to rows per call)."""
    x, weight, bias, res = _leaf(2, 5, 24), _leaf(13, 24), _leaf(13), _leaf(2, 5, 13)
    _check("linear", x, weight, bias, res, act, torch.float32)


LAYOUTS = {
    "transposed_x": lambda: (_leaf(24, 19, grad=False).t().requires_grad_(), _leaf(13, 24)),
    "strided_x": lambda: (_leaf(19, 50, grad=False)[:, 3:27].requires_grad_(), _leaf(13, 24)),
    "transposed_weight": lambda: (_leaf(19, 24), _leaf(24, 13, grad=False).t().requires_grad_()),  # dW as A^T dZ
    "expanded_x": lambda: (_leaf(1, 24, grad=False).expand(19, 24), _leaf(13, 24)),                # stride 0
}


@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_operand_layouts(layout, act):
    x, weight = LAYOUTS[layout]()
    _check("linear", x, weight, _leaf(13), None, act, torch.float32)


@pytest.mark.parametrize("needs", [(True, False, False, False), (False, True, True, False),
                                   (False, False, False, True), (True, True, True, True), (False,) * 4])
@pytest.mark.parametrize("act", ["relu", "gelu_tanh"])
def test_requires_grad_combinations(needs, act):
    """Every subset of x, weight, bias and residual needing a gradient (none: no autograd node)."""
    x, weight, bias, res = (_leaf(*s, grad=n) for s, n in zip(((19, 24), (13, 24), (13,), (19, 13)), needs))
    runs = _check("linear", x, weight, bias, res, act, torch.float32)
    assert (runs[2][0].grad_fn is None) == (not any(needs))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("act", ["none", "gelu"])
def test_gemm_prepared_call(ta, tb, act):
    """gemm(a, b): dB in B's layout (K-major B: computed as (dZ^T A)^T), A and B stored either way."""
    M, N, K = 21, 34, 45
    a = _leaf(K, M, grad=False).t().requires_grad_() if ta else _leaf(M, K)
    b = _leaf(N, K, grad=False).t().requires_grad_() if tb else _leaf(K, N)
    grads = _check("gemm", a, b, _leaf(N), _leaf(M, N), act, torch.float32)[2][1]
    assert grads[1].stride() == b.stride()


@pytest.mark.parametrize("config", [SPLITK_SMALL, TMA_SMALL, gemm.Config({**TMA_SMALL.kwargs, "B_RELAYOUT": 1}, 4, 1)],
                         ids=["split_k", "tma", "tma_relayout"])
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_forced_plans_through_the_prepared_call(config, act):
    """The forward GEMM's split-K (partials + reduction) and persistent TMA plans (B read as it is, or a copy
    in the other layout made per call) through the prepared call; the backward's GEMMs are tuned."""
    x, weight, bias, res = _leaf(70, 96), _leaf(72, 96), _leaf(72), _leaf(70, 72)
    _check("linear", x, weight, bias, res, act, torch.float32, config=config)


@pytest.mark.parametrize("act,dtype", [("relu", torch.float16), ("none", torch.float32)])
def test_bias_gradient_past_the_column_kernel(act, dtype):
    """More than gemm._ACT_COLUMNS_MAX_M rows: dbias from per-tile fp32 partials that the last program of each
    column block adds in a fixed order and stores in the bias dtype: the general and the prepared calls agree
    bit for bit, on a GPU too."""
    M = gemm._ACT_COLUMNS_MAX_M + 77
    x, weight, bias = _leaf(M, 3, dtype=dtype), _leaf(5, 3, dtype=dtype), _leaf(5, dtype=dtype)
    grads = _check("linear", x, weight, bias, None, act, dtype)[2][1]
    assert grads[2].dtype == dtype


def test_linear_module_runs_prepared():
    """models.layers.Linear called eagerly: its calls after the first are its prepared call's."""
    layer = Linear(24, 13, activation="gelu").to(DEVICE)
    x = _leaf(9, 24)
    for _ in range(3):
        y = layer(x)
        y.backward(torch.ones_like(y))
    assert type(y.grad_fn).__name__ == FAST_NODE
    assert _prepared("linear", x, layer.weight, layer.bias, None, "gelu").forward_gemm is not None


# ------------------------------------------------------------------------------------------ signatures
def test_second_call_takes_the_prepared_call():
    """The first call of a signature keeps a prepared call (nothing fixed yet); the second fixes and launches
    its forward GEMM, the first backward its backward launches; later calls keep nothing new."""
    x, weight, bias = _leaf(11, 20), _leaf(7, 20), _leaf(7)
    assert _prepared("linear", x, weight, bias, None, "relu") is None
    y = gemm.linear(x, weight, bias, "relu")
    call = _prepared("linear", x, weight, bias, None, "relu")
    assert call is not None and call.forward_gemm is None and type(y.grad_fn).__name__ != FAST_NODE
    y.sum().backward()
    y = gemm.linear(x, weight, bias, "relu")
    assert call.forward_gemm is not None and type(y.grad_fn).__name__ == FAST_NODE and not call.backward_launches
    y.sum().backward()
    assert len(call.backward_launches) == 1
    kept, forward_gemm = len(gemm_eager._CALLS), call.forward_gemm
    for _ in range(2):
        gemm.linear(x, weight, bias, "relu").sum().backward()
    assert len(gemm_eager._CALLS) == kept and call.forward_gemm is forward_gemm
    assert len(call.backward_launches) == 1


@pytest.mark.parametrize("bad,match", [
    (lambda x, w, b: gemm.linear(x, w, b[:4]), "bias has 4 elements"),
    (lambda x, w, b: gemm.linear(x, w.half(), b), "weight has dtype torch.float16 but x has torch.float32"),
    (lambda x, w, b: gemm.linear(x, w, b.double()), "bias has dtype"),
    (lambda x, w, b: gemm.linear(x[:, :5], w, b), "x has 5 features"),
    (lambda x, w, b: gemm.linear(x, w, b, residual=torch.randn(3, 2, device=DEVICE)), "residual has shape"),
    (lambda x, w, b: gemm.linear(x, w, b, "tanh"), "activation must be"),
    (lambda x, w, b: gemm.linear(x, w, b, precision="fp8"), "precision must be"),
    (lambda x, w, b: gemm.linear(x, w, b, config="BLOCK_M=32"), "config must be"),
    (lambda x, w, b: gemm.linear(x.to("meta"), w, b), "x is a meta tensor"),
    (lambda x, w, b: gemm.gemm(x, w, b), "a.shape\\[1\\] must equal"),
])
def test_bad_input_after_a_good_call_raises(bad, match):
    """A signature seen before does not vouch for another: bad input still fails validation, naming the
    argument, before any launch."""
    x, w, b = torch.randn(6, 10, device=DEVICE), torch.randn(8, 10, device=DEVICE), torch.randn(8, device=DEVICE)
    for _ in range(2):
        gemm.linear(x, w, b)
    assert _prepared("linear", x, w, b) is not None
    with pytest.raises(ValueError, match=match):
        bad(x, w, b)


def test_a_new_dtype_shape_layout_or_grad_mode_is_a_new_signature():
    x, w = torch.randn(6, 10, device=DEVICE), torch.randn(8, 10, device=DEVICE)
    w_grad = w.clone().requires_grad_()
    variants = [(x, w), (x.half(), w.half()), (x[:5], w), (x.t().contiguous().t(), w), (x, w_grad)]
    calls = []
    for xi, wi in variants:
        gemm.linear(xi, wi)
        calls.append(_prepared("linear", xi, wi))
    assert all(calls) and len(set(map(id, calls))) == len(variants)
    assert calls[4].needs == (False, True, False, False) and calls[0].needs is None
    with torch.no_grad():  # without autograd, w_grad's call is w's: nothing to save, the same kernels
        assert _prepared("linear", x, w_grad) is calls[0]


def test_the_signature_cache_is_bounded():
    """Past runtime.MAX_CALL_SIGNATURES signatures the cache is emptied, never grown further."""
    w = torch.randn(1, 1, device=DEVICE)
    for stride in range(1, runtime.MAX_CALL_SIGNATURES + 2):  # (2, 1) inputs of row stride 1, 2, ...: new signatures
        x = torch.randn(2, stride, device=DEVICE)[:, :1]
        gemm.linear(x, w)
        assert _prepared("linear", x, w) is not None
        assert len(gemm_eager._CALLS) <= runtime.MAX_CALL_SIGNATURES


# ------------------------------------------------------------------------------------------ unusual calls
@pytest.mark.parametrize("op", ["linear", "gemm"])
def test_autocast_casts_the_operands_as_torch_does(op):
    """Under autocast linear / gemm compute in the autocast dtype, as functional.linear / torch.matmul do there:
    the fp32 operands cast (fp16 in the interpreter, which has no bf16 dot; bf16 on the GPU), the output in
    that dtype, the gradients back in fp32 through the casts; a later call of the same signature takes the
    fast path with the cast operands; outside autocast, fp32 again."""
    device_type = torch.device(DEVICE).type
    dtype = torch.bfloat16 if GPU else torch.float16
    x = torch.randn(6, 10, device=DEVICE, requires_grad=True)
    w = torch.randn(8, 10, device=DEVICE, requires_grad=True)
    bias = torch.randn(8, device=DEVICE, requires_grad=True)
    ours = (lambda: gemm.linear(x, w, bias)) if op == "linear" else (lambda: gemm.gemm(x, w.t(), bias))
    with torch.autocast(device_type, dtype=dtype):
        want = functional.linear(x, w, bias) if op == "linear" else torch.matmul(x, w.t()) + bias.to(dtype)
        ys = [ours(), ours()]  # the general path, then the signature's prepared call
        cast = [t.to(dtype) for t in (x, w, bias)]  # as the calls cast them: needing gradients
        b = cast[1] if op == "linear" else cast[1].t()
        assert gemm_eager.lookup(op, cast[0], b, cast[2], None, "none", "ieee", None)[1] is not None
    ref = x.detach().to(dtype).double() @ w.detach().to(dtype).double().t() + bias.detach().to(dtype).double()
    for y in ys:
        assert y.dtype == want.dtype == dtype
        assert_close(y, ref, dtype)
        dx, dw, dbias = torch.autograd.grad(y, (x, w, bias), torch.ones_like(y))
        assert dx.dtype == dw.dtype == dbias.dtype == torch.float32
        ones = torch.ones(6, 8, device=DEVICE, dtype=torch.float64)
        assert_close(dw, ones.t() @ x.detach().to(dtype).double(), dtype)
        assert_close(dbias, torch.full((8,), 6.0, device=DEVICE, dtype=torch.float64), dtype)
    y = ours()
    assert y.dtype == torch.float32
    assert_close(y, x.detach().double() @ w.detach().double().t() + bias.detach().double(), torch.float32)


def test_empty_shapes_and_tensor_subclasses_are_not_kept():
    class Tagged(torch.Tensor):
        pass

    w = torch.randn(8, 10, device=DEVICE)
    empty, tagged = torch.randn(0, 10, device=DEVICE), torch.randn(6, 10, device=DEVICE).as_subclass(Tagged)
    for _ in range(2):
        assert gemm.linear(empty, w).shape == (0, 8)
        y = gemm.linear(tagged, w)
    assert _prepared("linear", empty, w) is None and _prepared("linear", tagged, w) is None
    assert_close(y.as_subclass(torch.Tensor), tagged.as_subclass(torch.Tensor).double() @ w.double().t(),
                 torch.float32)


def test_misaligned_operand_takes_its_own_launch():
    """The same signature at an address off 16 bytes (a view one element into its storage): the fixed
    launch's guard takes the kernel's general launch for it, with the right result."""
    w = torch.randn(8, 10, device=DEVICE)
    storage = torch.randn(61, device=DEVICE)
    aligned, shifted = storage[:60].view(6, 10), storage[1:].view(6, 10)
    for _ in range(2):
        gemm.linear(aligned, w, activation="relu")
    assert _prepared("linear", shifted, w, activation="relu").forward_gemm is not None
    assert_close(gemm.linear(shifted, w, activation="relu"), torch.relu(shifted.double() @ w.double().t()),
                 torch.float32)


def test_forced_tma_config_on_a_misaligned_operand_raises_as_the_general_path():
    w = torch.randn(72, 96, device=DEVICE)
    storage = torch.randn(70 * 96 + 1, device=DEVICE)
    aligned, shifted = storage[:-1].view(70, 96), storage[1:].view(70, 96)
    for _ in range(2):
        gemm.linear(aligned, w, config=TMA_SMALL)
    with pytest.raises(ValueError, match="cannot be read through a TMA descriptor"):
        gemm.linear(shifted, w, config=TMA_SMALL)


@pytest.mark.parametrize("has_bias,has_res", [(True, False), (False, False), (True, True)],
                         ids=["bias", "plain", "bias_residual"])
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
@pytest.mark.parametrize("op", ["linear", "gemm"])
def test_double_backward_matches_float64(op, act, has_bias, has_res):
    """create_graph=True: the prepared call's backward runs the general path's (gemm.backward_ops:
    the differentiable GEMM op, the activation and bias pass in torch's ops), so gradients and second
    derivatives in every input (incoming gradient depending on all of them) of the three calls equal
    float64 torch's, and each other bit for bit."""
    a = torch.randn(4, 5, device=DEVICE)
    b = torch.randn((6, 5) if op == "linear" else (5, 6), device=DEVICE)
    leaves = [a, b] + ([torch.randn(6, device=DEVICE)] if has_bias else [])
    leaves += [torch.randn(4, 6, device=DEVICE)] if has_res else []
    out_weight = torch.randn(4, 6, device=DEVICE, dtype=torch.float64)
    directions = [torch.randn(t.shape, device=DEVICE, dtype=torch.float64) for t in leaves]

    def unpack(args):
        return args[0], args[1], args[2] if has_bias else None, args[-1] if has_res else None

    def ours(*args):
        a, b, bias, residual = unpack(args)
        if op == "linear":
            return gemm.linear(a, b, bias, act, residual)
        return gemm.gemm(a, b, bias, residual, act)

    def reference(*args):
        a, b, bias, residual = unpack(args)
        z = a @ (b.t() if op == "linear" else b) + (bias if has_bias else 0)
        return REF_ACT[act](z) + (residual if has_res else 0)

    assert _prepared(op, *unpack([t.requires_grad_() for t in leaves]), act) is None
    expect = second_derivatives(reference, [t.detach().double().requires_grad_() for t in leaves], out_weight,
                                directions)
    runs = [second_derivatives(ours, [t.detach().clone().requires_grad_() for t in leaves], out_weight, directions)
            for _ in range(3)]
    assert _prepared(op, *unpack(leaves), act) is not None
    for run, (grads, second) in enumerate(runs):
        for i, leaf in enumerate(leaves):
            assert_close(grads[i], expect[0][i], torch.float32, name=f"run {run}: gradient {i}")
            assert_close(second[i], expect[1][i], torch.float32, name=f"run {run}: second derivative {i}")
            assert torch.equal(second[i], runs[0][1][i]), f"run {run}: second derivative {i} differs"


def test_chained_launch_sets_the_flag_and_the_dependent_option():
    """The chained backward's launches (gemm_eager._chained): the plan's kernel rebound with PDL=True (the plan
    itself binds PDL=False), launched as a programmatic dependent only for the second GEMM; grid and arguments
    unchanged. On the CPU no backward chains (runtime.dependent_launch)."""
    a, b = torch.randn(64, 32, device=DEVICE), torch.randn(32, 48, device=DEVICE)
    c = torch.empty(64, 48, device=DEVICE)
    plan = gemm.find_plan(a, b, c, None, None, None, "none", "ieee", False)
    (kernel, grid, args), = gemm.plan_launches(plan, a, b, c, None, None, None, 64, 48, 32)
    assert kernel.constexprs["PDL"] is False
    for dependent in (False, True):
        chained, grid2, args2 = gemm_eager._chained(kernel, grid, args, dependent)
        assert chained.constexprs == dict(kernel.constexprs, PDL=True) and grid2 == grid and args2 is args
        assert chained.options.get("launch_pdl", False) is dependent
    if DEVICE == "cpu":
        assert not runtime.dependent_launch(a.device)


# ------------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("shape", [(512, 8704, 1024), (512, 1024, 1024), (128, 784, 10)],
                         ids=["char_cnn_fc_8704", "char_cnn_fc_1024", "mnist"])
def test_gpu_study_shapes(shape, act):
    """The studies' Linear shapes in bf16 (fp32 for MNIST) with the tuned plans (pointer, split-K, TMA:
    whichever the tuner keeps), prepared call against general path and float64."""
    M, K, N = shape
    dtype = torch.float32 if N == 10 else torch.bfloat16
    x = _leaf(M, K, dtype=dtype)
    weight = (torch.randn(N, K, device=DEVICE, dtype=dtype) / K ** 0.5).requires_grad_()
    _check("linear", x, weight, _leaf(N, dtype=dtype), None, act, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2048, 4096, 1024), (512, 8704, 1024)], ids=["2048x4096x1024", "char_cnn_fc1"])
@pytest.mark.parametrize("act", ["relu", "none"])
def test_gpu_chained_backward(act, shape):
    """A Linear whose backward chains dB -> dA (a programmatic dependent launch, above CHAIN_MIN_FLOPS): the
    prepared calls equal the general path (dA then dB, plain launches) bit for bit and float64; back-to-back
    calls on new inputs and graph replays each give their own gradients (a dA that ended before dB, or read
    what dB writes, would not)."""
    M, K, N = shape
    assert 2 * M * N * K >= gemm_eager.CHAIN_MIN_FLOPS
    x = _leaf(M, K, dtype=torch.bfloat16)
    weight = (torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16) / K ** 0.5).requires_grad_()
    bias = _leaf(N, dtype=torch.bfloat16)
    _check("linear", x, weight, bias, None, act, torch.bfloat16)
    call = _prepared("linear", x, weight, bias, None, act)
    assert call.chain == (torch.cuda.get_device_capability() >= (9, 0))
    grad_out = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16)

    def step(inp):
        y = gemm.linear(inp, weight, bias, act)
        return torch.autograd.grad(y, (inp, weight), grad_out)

    inputs = [(torch.randn(M, K, device=DEVICE) * (i + 1)).to(torch.bfloat16).requires_grad_() for i in range(3)]
    with torch.no_grad():
        refs = [gemm.backward_ops(grad_out, inp.detach(), weight.detach().t(),
                                  gemm.gemm_forward(inp.detach(), weight.detach().t(), bias.detach(),
                                                    activation=act)[0] if act != "none" else None,
                                  (True, True, False, False), act, "ieee", None, fused=False)[:2]
                for inp in inputs]
    for inp, (ref_dx, ref_dwt) in zip(inputs, refs):  # back to back on the prepared call
        dx, dw = step(inp)
        assert torch.equal(dx, ref_dx) and torch.equal(dw, ref_dwt.t())
    static = inputs[0].detach().clone().requires_grad_()
    graph, outs = runtime.capture_graph(lambda: step(static), warmup=1)
    for inp, (ref_dx, ref_dwt) in zip(inputs[::-1], refs[::-1]):
        with torch.no_grad():
            static.copy_(inp)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(outs[0], ref_dx) and torch.equal(outs[1], ref_dwt.t())


@pytest.mark.gpu
def test_gpu_launch_hook_takes_tritons_launch():
    """With a launch hook installed (a profiler), the prepared call's launches go through Triton's own
    launch, which calls the hook, and give the same result."""
    import triton

    x, w = _leaf(64, 96, grad=False), _leaf(72, 96, grad=False)
    expected = [gemm.linear(x, w, activation="gelu") for _ in range(2)][1]
    seen = []

    def record(metadata):
        seen.append(metadata)

    knobs = triton.knobs.runtime
    chain = knobs.launch_enter_hook
    if hasattr(chain, "add"):  # a chain of hooks (newer Triton)
        chain.add(record)
    else:
        knobs.launch_enter_hook = record
    try:
        y = gemm.linear(x, w, activation="gelu")
    finally:
        if hasattr(chain, "add"):
            chain.remove(record)
        else:
            knobs.launch_enter_hook = chain
    assert seen and torch.equal(y, expected)


@pytest.mark.gpu
def test_gpu_compile_after_eager_calls():
    """Prepared calls kept by eager calls do not leak into torch.compile(fullgraph=True), which traces the
    registered op; both give the same output and gradients."""
    layer = Linear(96, 72, activation="gelu").to(DEVICE)
    x = _leaf(64, 96)
    for _ in range(2):
        eager = layer(x)
    eager_grads = torch.autograd.grad(eager.sum(), (x, layer.weight))
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)(x)
    assert type(compiled.grad_fn).__name__ != FAST_NODE
    compiled_grads = torch.autograd.grad(compiled.sum(), (x, layer.weight))
    assert_close(compiled, eager.double(), torch.float32)
    for g, e in zip(compiled_grads, eager_grads):
        assert_close(g, e.double(), torch.float32)


# BLOCK_K 32: the stages of fp32 tiles stay well inside shared memory
GPU_TMA = gemm.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "TMA": 1}, 8, 3)
GPU_PLANS = {"pointer": gemm.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, 8, 3),
             "split_k": gemm.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "SPLIT_K": 4}, 4, 4),
             "tma": GPU_TMA, "tma_relayout": gemm.Config({**GPU_TMA.kwargs, "B_RELAYOUT": 1}, 8, 3)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("plan", GPU_PLANS)
def test_gpu_forced_plans_through_the_prepared_call(plan, dtype):
    """Each kind of forward plan compiled and launched through the prepared call's fixed launches (the
    compiled launcher called directly; the TMA kernel's host-side descriptors encoded once), in every GPU dtype."""
    x, weight = _leaf(384, 512, dtype=dtype), (torch.randn(256, 512, device=DEVICE, dtype=dtype) / 512 ** 0.5)
    _check("linear", x, weight.requires_grad_(), _leaf(256, dtype=dtype), _leaf(384, 256, dtype=dtype), "gelu",
           dtype, config=GPU_PLANS[plan])


@pytest.mark.gpu
def test_gpu_tma_descriptors_take_the_direct_launch():
    """The TMA kernel takes host-side descriptors: its prepared calls go to the C entry point with the
    descriptors' encodings kept (launcher._descriptor_entry found Triton's entry point and metadata), not
    through Triton's launcher, which would encode them at every launch; new inputs get their own maps."""
    from triton_kernels import launcher
    from triton_kernels.gemm_kernels import _gemm_tma_kernel

    x, weight = _leaf(384, 512, dtype=torch.bfloat16, grad=False), _leaf(256, 512, dtype=torch.bfloat16, grad=False)
    for _ in range(3):
        gemm.linear(x, weight, config=GPU_TMA)
    bound = [b for b in launcher._BOUND.values() if b.kernel is _gemm_tma_kernel and b._compiled]
    assert bound and all(b._descriptor_metas.keys() == b._compiled.keys() for b in bound)
    x2 = _leaf(384, 512, dtype=torch.bfloat16, grad=False)
    for inputs in ((x, weight), (x2, weight)):
        assert_close(gemm.linear(*inputs, config=GPU_TMA), inputs[0].double() @ weight.double().t(), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("act", gemm.ACTIVATIONS)
def test_gpu_bf16_prepared_call(act):
    x, weight, bias = (_leaf(*s, dtype=torch.bfloat16) for s in ((300, 256), (200, 256), (200,)))
    _check("linear", x, weight, bias, None, act, torch.bfloat16)
