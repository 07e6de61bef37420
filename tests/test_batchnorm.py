"""BatchNorm2d (+ ReLU, + residual add) against float64: output, every gradient (x, weight, bias, residual),
running statistics against torch's, channels_last and NCHW layouts and the view matrix, inference mode,
NaN propagation, the BatchNormAct2d module, BN folding, bad input (CPU interpreter); bf16 at ResNet
shapes, the view matrix in bf16 and torch.compile(fullgraph=True) on the GPU."""
import pytest
import torch
from torch.nn import functional

from models.resnet import BatchNormAct2d
from triton_kernels import batchnorm, batchnorm_eager, runtime, stream_buffers
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, rel_err

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, check_case, view_cases

COMBOS = [(True, True), (True, False), (False, False)]  # (relu, residual)


def reference(x, weight, bias, residual=None, relu=False, running=None, momentum=0.1, eps=1e-5, relu_mask=None):
    """float64 act(functional.batch_norm(training) [+ residual]); ``running``: float64 buffers updated in place.
    ``relu_mask``: the ReLU states to use (the kernel's own, ``y > 0``): a unit within rounding of zero may
    sit on the other side in float64, which moves a whole gradient entry and says nothing of the kernel."""
    rm, rv = running if running is not None else (None, None)
    y = functional.batch_norm(x.double(), rm, rv, weight.double() if weight is not None else None,
                              bias.double() if bias is not None else None, True, momentum, eps)
    if residual is not None:
        y = y + residual.double()
    if relu and relu_mask is not None:
        return y * relu_mask.to(y.dtype)
    return functional.relu(y) if relu else y


def _check(shape, dtype, fmt, relu, use_res, momentum=0.1, scale=1.0):
    C = shape[1]
    x = (torch.randn(shape, device=DEVICE) * 2 + 3).to(dtype).to(memory_format=fmt).requires_grad_()
    w = (torch.randn(C, device=DEVICE) * 0.5 + 1).requires_grad_()
    b = torch.randn(C, device=DEVICE).requires_grad_()
    res = torch.randn(shape, device=DEVICE).to(dtype).to(memory_format=fmt).requires_grad_() if use_res else None
    rm, rv = torch.randn(C, device=DEVICE), torch.rand(C, device=DEVICE) + 0.5
    rm64, rv64 = rm.double().cpu(), rv.double().cpu()
    rm32, rv32 = rm.clone(), rv.clone()
    y = batchnorm.batch_norm(x, rm, rv, w, b, True, momentum, 1e-5, residual=res, relu=relu)
    assert y.dtype == dtype and y.shape == x.shape
    assert y.is_contiguous(memory_format=fmt)
    leaves = [t.detach().cpu().double().requires_grad_() if t is not None else None for t in (x, w, b, res)]
    ref = reference(*leaves, relu=relu, running=(rm64, rv64), momentum=momentum,
                    relu_mask=(y.detach().cpu() > 0) if relu else None)
    assert_close(y, ref, dtype, name="y", scale=scale)
    # running statistics: against float64 and against torch's own fp32 update
    functional.batch_norm(x.detach().float(), rm32, rv32, None, None, True, momentum, 1e-5)
    for name, ours, r64, r32 in (("running_mean", rm, rm64, rm32), ("running_var", rv, rv64, rv32)):
        assert_close(ours, r64, torch.float32 if dtype == torch.float32 else dtype, name=name)
        assert rel_err(ours, r32) <= 1e-5, name
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g.cpu().double())
    for name, t, leaf in zip(("dx", "dweight", "dbias", "dresidual"), (x, w, b, res), leaves):
        if t is not None:
            assert t.grad.dtype == t.dtype, name
            assert_close(t.grad, leaf.grad, dtype, name=name, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
def test_forward_backward(dtype, fmt, relu, use_res):
    _check((3, 20, 5, 7), dtype, fmt, relu, use_res)


@pytest.mark.parametrize("shape", [(1, 3, 1, 3), (2, 1, 3, 3), (5, 33, 1, 1), (2, 40, 9, 9)])
def test_odd_shapes(shape):
    """One sample (three values per channel: with two, dx is exactly 0), one channel, 1x1 maps, more
    channels than a block."""
    _check(shape, torch.float32, torch.channels_last, True, True)


@pytest.mark.parametrize("config", [Config({"BLOCK_M": 4, "BLOCK_C": 8, "PER_SM": 5}, 4, 1),
                                    Config({"BLOCK_M": 128, "BLOCK_C": 64}, 4, 1),
                                    Config({"BLOCK_M": 16, "BLOCK_C": 4}, 4, 1),
                                    Config({"BLOCK_M": 32, "BLOCK_C": 16, "ACC_ROWS": 4, "PER_SM": 3}, 4, 1),
                                    Config({"BLOCK_M": 16, "BLOCK_C": 8, "ACC_ROWS": 1}, 4, 1)],
                         ids=["many_groups", "one_tile", "half_byte_blocks", "folded", "folded_to_one_row"])
def test_config_chooses_the_tiling(config):
    """Explicit tilings: many small tiles in many groups (partial channel blocks, uneven groups), one
    tile holding every pixel, channel blocks of 4 (the kernels storing and reading the relu bits widen
    theirs to a byte's 8 channels), and reductions whose accumulators fold the tile's rows (ACC_ROWS < BLOCK_M,
    partial tiles included); forward and backward use the same tiling."""
    x = (torch.randn(3, 20, 5, 7, device=DEVICE) * 2 + 1).to(memory_format=torch.channels_last).requires_grad_()
    res = torch.randn_like(x).requires_grad_()
    w = (torch.rand(20, device=DEVICE) + 0.5).requires_grad_()
    y = batchnorm.batch_norm(x, None, None, w, None, residual=res, relu=True, config=config)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, res)]
    ref = reference(leaves[0], leaves[1], None, leaves[2], relu=True)
    assert_close(y, ref, torch.float32)
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g.double())
    for t, leaf in zip((x, w, res), leaves):
        assert_close(t.grad, leaf.grad, torch.float32)


def test_momentum_extremes():
    _check((2, 6, 4, 4), torch.float32, torch.channels_last, True, False, momentum=1.0)
    _check((2, 6, 4, 4), torch.float32, torch.contiguous_format, False, False, momentum=0.0)


def test_reductions_leave_their_counters_at_zero():
    """The last program of each channel block merges the partials and resets its arrival counter: calls
    in a row give the same statistics and gradients bit for bit, and the counters end at zero."""
    x = torch.randn(8, 40, 5, 7, device=DEVICE).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.rand(40, device=DEVICE).requires_grad_()
    config = Config({"BLOCK_M": 16, "BLOCK_C": 16}, 4, 1)  # 3 channel blocks, several groups each
    outs = []
    for _ in range(3):
        rm, rv = torch.zeros(40, device=DEVICE), torch.ones(40, device=DEVICE)
        y = batchnorm.batch_norm(x, rm, rv, w, None, True, 0.1, 1e-5, relu=True, config=config)
        dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        outs.append((y, rm, rv, dx, dw))
    for later in outs[1:]:
        for a, b in zip(outs[0], later):
            assert torch.equal(a, b)
    for buf in stream_buffers._COUNTERS.values():
        assert int(buf.count_nonzero()) == 0


def test_tuning_trials_update_the_running_statistics_once():
    """The tuner launches the statistics kernel once per candidate: those trials must not move the
    running statistics (a fresh geometry here, so its first call tunes)."""
    x = torch.randn(3, 5, 3, 11, device=DEVICE)
    rm, rv = torch.zeros(5, device=DEVICE), torch.ones(5, device=DEVICE)
    rm32, rv32 = rm.clone(), rv.clone()
    batchnorm.batch_norm(x, rm, rv, None, None, True, 0.5, 1e-5)
    functional.batch_norm(x, rm32, rv32, None, None, True, 0.5, 1e-5)
    assert rel_err(rm, rm32) <= 1e-5 and rel_err(rv, rv32) <= 1e-5


@pytest.mark.parametrize("relu,use_res", COMBOS)
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format])
def test_repeated_signature_takes_the_fast_path(relu, use_res, fmt):
    """The second call of a signature runs the eager fast path: outputs, gradients and running statistics
    equal the first (general) call's bit for bit; a call with a new weight is validated again."""
    shape = (3, 12, 5, 4)
    x = torch.randn(shape, device=DEVICE).to(memory_format=fmt).requires_grad_()
    res = torch.randn(shape, device=DEVICE).to(memory_format=fmt).requires_grad_() if use_res else None
    w, b = torch.rand(12, device=DEVICE).requires_grad_(), torch.randn(12, device=DEVICE).requires_grad_()
    runs = []
    for _ in range(2):
        rm, rv = torch.zeros(12, device=DEVICE), torch.ones(12, device=DEVICE)
        y = batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, residual=res, relu=relu)
        leaves = [t for t in (x, w, b, res) if t is not None]
        runs.append((y, rm, rv) + torch.autograd.grad(y, leaves, torch.ones_like(y) + y))
    assert len(batchnorm_eager._FAST) > 0
    for a, c in zip(*runs):
        assert torch.equal(a, c)
    with torch.no_grad():  # training mode without autograd: the same forward
        rm, rv = torch.zeros(12, device=DEVICE), torch.ones(12, device=DEVICE)
        assert torch.equal(batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, residual=res, relu=relu), runs[0][0])
    with pytest.raises(ValueError, match="weight"):  # a seen x with a new weight is validated again
        batchnorm.batch_norm(x, None, None, torch.rand(7, device=DEVICE), b, True, 0.1, 1e-5, residual=res, relu=relu)
    with torch.no_grad():  # inference: the fast path's output equals the general path's
        rm, rv = torch.randn(12, device=DEVICE), torch.rand(12, device=DEVICE) + 0.5
        first, second = (batchnorm.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5, residual=res, relu=relu)
                         for _ in range(2))
        assert torch.equal(first, second) and len(batchnorm_eager._FAST_INFER) > 0
        ref = functional.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), False, 0.0, 1e-5)
        ref = ref + res.double() if use_res else ref
        assert_close(second, functional.relu(ref) if relu else ref, torch.float32, name="inference y")


@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("second_used", [True, False], ids=["both_used", "second_unused"])
def test_two_outputs_gradients_apart(relu, use_res, dtype, second_used):
    """two_outputs: (y, y2) share memory; the gradients reaching y and y2 (y2's in another layout) are
    summed -- by autograd on the general path, in the backward kernels on the fast path -- and every gradient
    matches float64. The fast path's backward gets the two apart (its node has two outputs); in fp32 it equals
    the general path bit for bit (autograd's add is the kernels' fp32 add)."""
    shape, C = (3, 12, 5, 4), 12
    x = torch.randn(shape, device=DEVICE).to(dtype).to(memory_format=torch.channels_last).requires_grad_()
    res = torch.randn(shape, device=DEVICE).to(dtype).to(memory_format=torch.channels_last).requires_grad_() \
        if use_res else None
    w, b = (torch.rand(C, device=DEVICE) + 0.5).requires_grad_(), torch.randn(C, device=DEVICE).requires_grad_()
    a = torch.randn(shape, device=DEVICE).to(memory_format=torch.channels_last)
    c = torch.randn(shape, device=DEVICE)  # NCHW: y2's gradient comes in another layout
    leaves = [t for t in (x, w, b, res) if t is not None]
    runs, nodes = [], []
    for _ in range(3):
        y, y2 = batchnorm.batch_norm(x, None, None, w, b, True, residual=res, relu=relu, two_outputs=True)
        assert y2.data_ptr() == y.data_ptr() and torch.equal(y, y2)
        nodes.append(type(y.grad_fn).__name__)
        loss = (y.float() * a).sum() + ((y2.float() * c).sum() if second_used else 0.0)
        runs.append((y,) + torch.autograd.grad(loss, leaves))
    assert nodes[1] == nodes[2] == "_NodeBackward"
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = reference(ref_leaves[0], ref_leaves[1], ref_leaves[2], ref_leaves[3] if use_res else None, relu=relu,
                    relu_mask=(runs[0][0].detach() > 0) if relu else None)
    ref_grads = torch.autograd.grad((ref * (a + c if second_used else a).double()).sum(), ref_leaves)
    for run in runs:
        for name, got, want in zip(("dx", "dweight", "dbias", "dresidual"), run[1:], ref_grads):
            assert_close(got, want, dtype, name=name)
    if dtype == torch.float32:
        for first, fast in zip(runs[0], runs[1]):
            assert torch.equal(first, fast)


@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format], ids=["cl", "nchw"])
@pytest.mark.parametrize("second_used", [True, False], ids=["both_used", "second_unused"])
def test_second_stride_gradients(relu, use_res, dtype, fmt, second_used):
    """two_outputs with second_stride=2: y2 = y[:, :, ::2, ::2] (odd H and W: the last row and column count),
    a view of y on the general path, a dense channels_last tensor of its own on the fast path, whose backward
    kernels add y2's small gradient (here in NCHW) where it lands; every gradient matches float64, and in fp32
    in the interpreter (one tiling per kernel: on a GPU the tuner may pick another for the fast path's kernels,
    which sums in another order) the fast path equals the general path bit for bit."""
    shape, C = (3, 12, 5, 7), 12
    x = torch.randn(shape, device=DEVICE).to(dtype).to(memory_format=fmt).requires_grad_()
    res = torch.randn(shape, device=DEVICE).to(dtype).to(memory_format=fmt).requires_grad_() if use_res else None
    w, b = (torch.rand(C, device=DEVICE) + 0.5).requires_grad_(), torch.randn(C, device=DEVICE).requires_grad_()
    a = torch.randn(shape, device=DEVICE)
    c = torch.randn((3, 12, 3, 4), device=DEVICE)
    leaves = [t for t in (x, w, b, res) if t is not None]
    runs, nodes = [], []
    batchnorm_eager._FAST.clear()  # the first call takes the general path
    for _ in range(3):
        y, y2 = batchnorm.batch_norm(x, None, None, w, b, True, residual=res, relu=relu, two_outputs=True,
                                     second_stride=2)
        assert torch.equal(y2, y[:, :, ::2, ::2]) and y.is_contiguous(memory_format=fmt)
        nodes.append((type(y.grad_fn).__name__, y2._base is None, y2.is_contiguous(memory_format=torch.channels_last)))
        loss = (y.float() * a).sum() + ((y2.float() * c).sum() if second_used else 0.0)
        runs.append((y,) + torch.autograd.grad(loss, leaves))
    assert nodes[1] == nodes[2] == ("_NodeBackward", True, True) and not nodes[0][1]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = reference(ref_leaves[0], ref_leaves[1], ref_leaves[2], ref_leaves[3] if use_res else None, relu=relu,
                    relu_mask=(runs[0][0].detach() > 0) if relu else None)
    weight = a.double().clone()
    if second_used:
        weight[:, :, ::2, ::2] += c.double()
    ref_grads = torch.autograd.grad((ref * weight).sum(), ref_leaves)
    for run in runs:
        for name, got, want in zip(("dx", "dweight", "dbias", "dresidual"), run[1:], ref_grads):
            assert_close(got, want, dtype, name=name)
    if dtype == torch.float32 and DEVICE == "cpu":
        for first, fast in zip(runs[0], runs[1]):
            assert torch.equal(first, fast)


def test_second_stride_without_grad_and_bad_values():
    """Without autograd the fast path hands back (y, y2) as well; second_stride is an int >= 1, and 1 unless
    two_outputs (a ValueError naming it, before any launch)."""
    x = torch.randn(2, 8, 4, 4, device=DEVICE).to(memory_format=torch.channels_last)
    with torch.no_grad():
        outs = [batchnorm.batch_norm(x, None, None, None, None, True, two_outputs=True, second_stride=2)
                for _ in range(2)]
    for y, y2 in outs:
        assert y2.shape == (2, 8, 2, 2) and torch.equal(y2, y[:, :, ::2, ::2])
    assert torch.equal(outs[0][0], outs[1][0])
    for kwargs in ({"second_stride": 2}, {"two_outputs": True, "second_stride": 0},
                   {"two_outputs": True, "second_stride": 2.0}):
        with pytest.raises(ValueError, match="second_stride"):
            batchnorm.batch_norm(x, None, None, None, None, True, **kwargs)


@pytest.mark.parametrize("relu,two_outputs,second_stride", [(True, True, 2), (True, False, 1), (False, True, 1)])
def test_pair_matches_float64_and_two_calls(relu, two_outputs, second_stride):
    """batch_norm_pair = batch_norm(x, residual=batch_norm(res_x)): its first call runs the two (general path),
    later ones one node whose apply normalises the residual (the shortcut's output never written). Output,
    every gradient (both inputs, both weights and biases) against float64, both running statistics against
    torch's; in the interpreter the fast path equals the two calls bit for bit; with create_graph the node's
    double-backward path gives the same gradients."""
    shape, C = (3, 12, 5, 7), 12
    x = torch.randn(shape, device=DEVICE).to(memory_format=torch.channels_last).requires_grad_()
    rx = (torch.randn(shape, device=DEVICE) * 2 + 1).to(memory_format=torch.channels_last).requires_grad_()
    w, b, rw, rb = ((torch.rand(C, device=DEVICE) + 0.5).requires_grad_() for _ in range(4))
    running = [torch.randn(C, device=DEVICE), torch.rand(C, device=DEVICE) + 0.5,
               torch.randn(C, device=DEVICE), torch.rand(C, device=DEVICE) + 0.5]
    torch_running = [t.clone() for t in running]
    a = torch.randn(shape, device=DEVICE)
    c = torch.randn((3, 12, 3, 4) if second_stride == 2 else shape, device=DEVICE)
    leaves = [x, w, b, rx, rw, rb]
    runs, nodes = [], []
    batchnorm_eager._FAST.clear()
    for i in range(4):
        out = batchnorm.batch_norm_pair(x, rx, running[0], running[1], w, b, running[2], running[3], rw, rb,
                                        relu=relu, two_outputs=two_outputs, second_stride=second_stride)
        y = out[0] if two_outputs else out
        nodes.append(type(y.grad_fn).__name__)
        loss = (y * a).sum() + ((out[1] * c).sum() if two_outputs else 0.0)
        runs.append((y,) + torch.autograd.grad(loss, leaves, create_graph=i == 3))
        functional.batch_norm(x.detach(), torch_running[0], torch_running[1], None, None, True, 0.1, 1e-5)
        functional.batch_norm(rx.detach(), torch_running[2], torch_running[3], None, None, True, 0.1, 1e-5)
    assert nodes[0] != "_PairNodeBackward" and nodes[1:] == ["_PairNodeBackward"] * 3
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = functional.batch_norm(ref_leaves[0], None, None, ref_leaves[1], ref_leaves[2], True) + functional.batch_norm(
        ref_leaves[3], None, None, ref_leaves[4], ref_leaves[5], True)
    ref = ref * (runs[0][0].detach() > 0) if relu else ref
    weight = a.double().clone()
    if two_outputs:
        weight[:, :, ::second_stride, ::second_stride] += c.double()
    ref_grads = torch.autograd.grad((ref * weight).sum(), ref_leaves)
    for run in runs:
        assert_close(run[0], ref, torch.float32, name="y")
        for name, got, want in zip(("dx", "dw", "db", "dres_x", "dres_w", "dres_b"), run[1:], ref_grads):
            assert_close(got, want, torch.float32, name=name)
    for ours, theirs in zip(running, torch_running):
        assert rel_err(ours, theirs) <= 1e-5
    if DEVICE == "cpu":
        for first, fast in zip(runs[0], runs[1]):
            assert torch.equal(first, fast)


@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
def test_double_backward_is_refused(relu, use_res):
    """The backward kernels have no derivative: with create_graph=True the gradients are the plain
    backward's, and differentiating them again raises a RuntimeError naming the backward op -- on the
    first (general) call of a signature and its fast-path calls alike -- never a silently detached
    gradient."""
    shape, C = (2, 3, 3, 3), 3
    x = torch.randn(shape, device=DEVICE).to(memory_format=torch.channels_last)
    w, b = torch.rand(C, device=DEVICE) + 0.5, torch.randn(C, device=DEVICE)
    res = torch.randn_like(x) if use_res else None
    out_weight = torch.randn(shape, device=DEVICE)
    nodes = []
    for _ in range(3):
        leaves = [t.clone().requires_grad_() for t in (x, w, b, res) if t is not None]
        y = batchnorm.batch_norm(leaves[0], None, None, leaves[1], leaves[2], True, residual=leaves[3] if use_res
                                 else None, relu=relu)
        nodes.append(type(y.grad_fn).__name__)
        plain = torch.autograd.grad((out_weight * y * y).sum(), leaves, retain_graph=True)
        grads = torch.autograd.grad((out_weight * y * y).sum(), leaves, create_graph=True)
        for i, (g, p) in enumerate(zip(grads, plain)):
            assert torch.equal(g, p), f"gradient {i} with create_graph differs from the plain one"
        with pytest.raises(RuntimeError, match="double backward is not supported by tk::batch_norm_act_backward"):
            torch.autograd.grad(sum((g * g).sum() for g in grads), leaves)
    assert nodes[0] != nodes[1] == nodes[2] == "_NodeBackward"  # the general path, then the fast path


@pytest.mark.parametrize("w_dtype,stats_dtype", [(torch.float16, torch.float32), (torch.float32, torch.float16),
                                                  (torch.float16, torch.float16)])
def test_inference_mode_gradient_mixed_dtypes(w_dtype, stats_dtype):
    """Inference mode with a gradient takes fp16 x with its parameters and statistics in other dtypes, as without
    one (torch's batch norm refuses such mixes): values and gradients against float64, in the inputs' dtypes."""
    C = 3
    x = torch.randn(2, C, 4, 4, device=DEVICE, dtype=torch.float16).requires_grad_()
    w = (torch.rand(C, device=DEVICE) + 0.5).to(w_dtype).requires_grad_()
    b = torch.randn(C, device=DEVICE).to(w_dtype).requires_grad_()
    rm, rv = torch.randn(C, device=DEVICE).to(stats_dtype), (torch.rand(C, device=DEVICE) + 0.5).to(stats_dtype)
    res = torch.randn_like(x)
    y = batchnorm.batch_norm(x, rm, rv, w, b, training=False, residual=res, relu=True)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    leaves64 = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = functional.relu(functional.batch_norm(leaves64[0], rm.double(), rv.double(), leaves64[1], leaves64[2],
                                                False) + res.double())
    assert y.dtype == torch.float16
    assert_close(y, y64, torch.float16)
    for g, t, g64 in zip(grads, (x, w, b), torch.autograd.grad(y64, leaves64, dy.double())):
        assert g.dtype == t.dtype
        assert_close(g, g64, torch.float16)


def test_inference_mode_double_backward_is_torchs():
    """Inference mode with a gradient runs torch's ops: second derivatives are torch's."""
    C = 3
    x = torch.randn(2, C, 3, 3, device=DEVICE)
    rm, rv = torch.randn(C, device=DEVICE), torch.rand(C, device=DEVICE) + 0.5
    w = torch.randn(C, device=DEVICE).requires_grad_()
    y = batchnorm.batch_norm(x.requires_grad_(), rm, rv, w, None, training=False, relu=True)
    gx, = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    second, = torch.autograd.grad(gx.sum(), w)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = functional.relu(functional.batch_norm(x64, rm.double(), rv.double(), w64, None, False))
    gx64, = torch.autograd.grad((y64 * y64).sum(), x64, create_graph=True)
    assert_close(second, torch.autograd.grad(gx64.sum(), w64)[0], torch.float32)


def test_large_mean_small_variance():
    """Shifted sums: a mean of 1e3 with std 1e-2 loses nothing a two-pass torch BN keeps."""
    x = torch.randn(4, 8, 6, 6, device=DEVICE) * 1e-2 + 1e3
    ref = functional.batch_norm(x.double(), None, None, None, None, True)
    torch_err = rel_err(functional.batch_norm(x, None, None, None, None, True), ref)
    assert rel_err(batchnorm.batch_norm(x), ref) <= max(2 * torch_err, 1e-5)


def test_nan_propagates_per_channel():
    x = torch.randn(2, 4, 3, 3, device=DEVICE).to(memory_format=torch.channels_last)
    x[1, 2, 0, 1] = float("nan")
    y = batchnorm.batch_norm(x, relu=True)
    ref = functional.relu(functional.batch_norm(x, None, None, None, None, True))
    assert torch.isnan(y[:, 2]).all() and torch.isnan(ref[:, 2]).all()
    assert torch.isfinite(y[:, [0, 1, 3]]).all()
    assert_close(y[:, [0, 1, 3]], ref[:, [0, 1, 3]].double(), torch.float32)


# ---------------------------------------------------------------------------------------------- views
VIEW_ARGS = {"x": Arg((2, 5, 3, 4)), "weight": Arg((5,), broadcast=(0,)), "bias": Arg((5,), broadcast=(0,)),
             "residual": Arg((2, 5, 3, 4))}
CASES = view_cases(VIEW_ARGS)


def view_case(arg: str, layout: str, dtype_name: str) -> None:
    """One view-matrix case (also run on the GPU through the `isolated` worker)."""
    dtype = getattr(torch, dtype_name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    check_case(ViewCase(arg, layout), VIEW_ARGS,
               lambda x, weight, bias, residual: batchnorm.batch_norm(x, None, None, weight, bias, residual=residual,
                                                                      relu=True),
               lambda x, weight, bias, residual: reference(x, weight, bias, residual, relu=True),
               dtype=dtype, device=device)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_views(case):
    view_case(case.arg, case.layout, "float32")


def test_channels_last_view_of_a_leaf():
    """x as the channels_last view (permute) of an NHWC leaf: the gradient reaches the leaf."""
    base = (torch.randn(3, 4, 5, 6, device=DEVICE) + 1).requires_grad_()
    base64 = base.detach().double().requires_grad_()
    y = batchnorm.batch_norm(base.permute(0, 3, 1, 2), relu=True)
    ref = functional.relu(functional.batch_norm(base64.permute(0, 3, 1, 2), None, None, None, None, True))
    assert_close(y, ref, torch.float32)
    g = torch.randn_like(ref)
    y.backward(g.float())
    ref.backward(g)
    assert_close(base.grad, base64.grad, torch.float32)


# ---------------------------------------------------------------------------------------------- inference
@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
def test_inference_mode(relu, use_res):
    C = 7
    x = torch.randn(3, C, 4, 5, device=DEVICE).to(memory_format=torch.channels_last)
    res = torch.randn_like(x) if use_res else None
    rm, rv = torch.randn(C, device=DEVICE), torch.rand(C, device=DEVICE) + 0.1
    w, b = torch.randn(C, device=DEVICE), torch.randn(C, device=DEVICE)
    with torch.no_grad():
        y = batchnorm.batch_norm(x, rm, rv, w, b, training=False, residual=res, relu=relu)
    ref = functional.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), False)
    ref = ref + res.double() if use_res else ref
    assert_close(y, functional.relu(ref) if relu else ref, torch.float32)
    # a gradient in inference mode goes through torch's ops (same values, differentiable)
    w.requires_grad_()
    y2 = batchnorm.batch_norm(x, rm, rv, w, b, training=False, residual=res, relu=relu)
    y2.sum().backward()
    assert_close(y2, y.double(), torch.float32) and w.grad is not None


def test_fold_into_conv():
    conv = torch.nn.Conv2d(3, 6, 3, padding=1).double()
    bn = torch.nn.BatchNorm2d(6).double().eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.normal_()
        bn.bias.normal_()
    w, b = batchnorm.fold_into_conv(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    assert_close(functional.conv2d(x, w, b, padding=1), bn(conv(x)), torch.float64)
    w0, b0 = batchnorm.fold_into_conv(conv.weight, None, bn.running_mean, bn.running_var)
    ref = functional.batch_norm(functional.conv2d(x, conv.weight, None, padding=1), bn.running_mean,
                                bn.running_var, None, None, False)
    assert_close(functional.conv2d(x, w0, b0, padding=1), ref, torch.float64)


# ---------------------------------------------------------------------------------------------- module
@pytest.mark.parametrize("momentum", [0.1, None])
def test_module_matches_batchnorm2d(momentum):
    """Same state_dict as nn.BatchNorm2d; six training steps and an eval step give torch's outputs and
    buffers (momentum None = the cumulative average over num_batches_tracked: a new momentum per step, so
    the fast path's fixed statistics launches run out after four and the general launch takes over)."""
    C = 6
    ours = BatchNormAct2d(C, relu=False, momentum=momentum)
    ours.fused = True
    ref = torch.nn.BatchNorm2d(C, momentum=momentum)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours.load_state_dict(ref.state_dict())
    assert set(ours.state_dict()) == set(ref.state_dict())
    x = torch.randn(4, C, 3, 3) * 3 + 1
    for _ in range(6):
        x = x.normal_() * 3 + 1
        assert_close(ours(x), ref(x).double(), torch.float32)
    for k, v in ref.state_dict().items():
        assert_close(ours.state_dict()[k], v.double(), torch.float32, name=k) if v.is_floating_point() else \
            torch.equal(ours.state_dict()[k], v)
    ours.eval()
    ref.eval()
    x = torch.randn(2, C, 3, 3)
    with torch.no_grad():
        assert_close(ours(x), ref(x).double(), torch.float32)


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad,match", [
    (lambda x: batchnorm.batch_norm(x[0]), "x must have 4 dims"),
    (lambda x: batchnorm.batch_norm(x.double()), "x has dtype"),
    (lambda x: batchnorm.batch_norm(x, weight=torch.ones(3)), "weight has 3 values but x has 4 channels"),
    (lambda x: batchnorm.batch_norm(x, running_mean=torch.zeros(4)), "given together"),
    (lambda x: batchnorm.batch_norm(x, residual=x[:, :, :2]), "residual has shape"),
    (lambda x: batchnorm.batch_norm(x, residual=x.half()), "residual has dtype"),
    (lambda x: batchnorm.batch_norm(x, momentum=1.5), "momentum must be"),
    (lambda x: batchnorm.batch_norm(x, eps=-1.0), "eps must be"),
    (lambda x: batchnorm.batch_norm(x[:1, :, :1, :1]), "more than 1 value per channel"),
    (lambda x: batchnorm.batch_norm(x, training=False), "needs running_mean"),
    (lambda x: batchnorm.batch_norm(x.to("meta")), "meta tensor"),
    (lambda x: batchnorm.batch_norm(x, config={"BLOCK_M": 4}), "config must be a triton_kernels.runtime.Config"),
    (lambda x: batchnorm.batch_norm(x, config=Config({"BLOCK_M": 4}, 4, 1)), "config must name BLOCK_M and BLOCK_C"),
    (lambda x: batchnorm.batch_norm(x, config=Config({"BLOCK_M": 6, "BLOCK_C": 4}, 4, 1)),
     "BLOCK_M must be a positive"),
    (lambda x: batchnorm.batch_norm(x, config=Config({"BLOCK_M": 8, "BLOCK_C": 4, "ACC_ROWS": 3}, 4, 1)),
     "ACC_ROWS must be a positive power of two"),
    (lambda x: batchnorm.batch_norm(x, config=Config({"BLOCK_M": 8, "BLOCK_C": 4, "ACC_ROWS": 16}, 4, 1)),
     "ACC_ROWS \\(16\\) must be at most its BLOCK_M"),
    (lambda x: batchnorm.fold_into_conv(torch.ones(5, 4, 3, 3), None, torch.zeros(4), torch.ones(4)),
     "expected \\(5,\\)"),
])
def test_bad_input_raises(bad, match):
    x = torch.randn(2, 4, 3, 3, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        bad(x)


@pytest.mark.skipif(DEVICE != "cpu", reason="interpreter only")
def test_bfloat16_refused_in_interpreter():
    with pytest.raises(ValueError, match="interpreter cannot compute"):
        batchnorm.batch_norm(torch.randn(2, 4, 3, 3, dtype=torch.bfloat16))


# ---------------------------------------------------------------------------------------------- GPU
RESNET_SHAPES = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", RESNET_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("relu,use_res", COMBOS, ids=["relu_res", "relu", "plain"])
def test_gpu_resnet_shapes_bf16(shape, relu, use_res):
    _check(shape, torch.bfloat16, torch.channels_last, relu, use_res)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format], ids=["channels_last", "nchw"])
def test_gpu_odd_and_nchw(dtype, fmt):
    _check((7, 33, 9, 11), dtype, fmt, True, True)
    _check((512, 128, 16, 16), dtype, fmt, True, False)


@pytest.mark.gpu
def test_gpu_explicit_configs():
    """Tilings the tuner may not pick, at a real shape, forward and backward: many groups of small tiles,
    large tiles, and folded accumulators."""
    for cfg in (Config({"BLOCK_M": 16, "BLOCK_C": 32, "PER_SM": 8}, 4, 1),
                Config({"BLOCK_M": 32, "BLOCK_C": 128}, 8, 3),
                Config({"BLOCK_M": 256, "BLOCK_C": 128, "ACC_ROWS": 32, "PER_SM": 4}, 8, 1),
                Config({"BLOCK_M": 128, "BLOCK_C": 128, "ACC_ROWS": 16}, 4, 1)):
        x = (torch.randn(256, 128, 16, 16, device="cuda") + 1).to(torch.bfloat16).to(memory_format=torch.channels_last)
        x.requires_grad_()
        res = torch.randn_like(x).requires_grad_()
        y = batchnorm.batch_norm(x, residual=res, relu=True, config=cfg)
        leaves = [t.detach().cpu().double().requires_grad_() for t in (x, res)]
        ref = reference(leaves[0], torch.ones(128, dtype=torch.float64), torch.zeros(128, dtype=torch.float64),
                        leaves[1], relu=True, relu_mask=y.detach().cpu() > 0)
        assert_close(y, ref, torch.bfloat16)
        g = torch.randn_like(y)
        y.backward(g)
        ref.backward(g.cpu().double())
        for t, leaf in zip((x, res), leaves):
            assert_close(t.grad, leaf.grad, torch.bfloat16)


def _check_calls_against_float64(y, dx, dres, x, res, w, b, g):
    leaves = [t.detach().double().requires_grad_() for t in (x, res, w, b)]
    ref = reference(leaves[0], leaves[2], leaves[3], leaves[1], relu=True, relu_mask=y.detach() > 0)
    ref_dx, ref_dres = torch.autograd.grad(ref, leaves[:2], g.double())
    assert_close(y, ref, torch.bfloat16, name="y")
    assert_close(dx, ref_dx, torch.bfloat16, name="dx")
    assert_close(dres, ref_dres, torch.bfloat16, name="dresidual")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(512, 256, 8, 8), (128, 64, 32, 32)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_dependent_launches_wait_for_their_reduction(shape):
    """On sm_90 and later a training call's apply and dx kernels are programmatic dependent launches: they
    start while the reduction ahead of them ends and wait for it before they read its statistics or
    coefficients. Calls back to back on inputs of different means and scales (the general path, the fast
    path, then replays of one CUDA graph) each match float64: a kernel that read before its reduction ended
    would have used the previous call's values."""
    C = shape[1]
    xs = [(torch.randn(shape, device="cuda") * (i + 1) + 3 * i).to(torch.bfloat16).to(memory_format=torch.channels_last)
          for i in range(4)]
    res = torch.randn_like(xs[0]).requires_grad_()
    w, b = torch.rand(C, device="cuda") + 0.5, torch.randn(C, device="cuda")
    g = torch.randn_like(xs[0])

    def call(x):
        y = batchnorm.batch_norm(x, None, None, w, b, residual=res, relu=True)
        return (y, *torch.autograd.grad(y, (x, res), g))

    for _ in range(2):  # the general path (first call of the signature), then the fast path
        for x in xs:
            x = x.clone().requires_grad_()
            _check_calls_against_float64(*call(x), x, res, w, b, g)
    static_x = xs[0].clone().requires_grad_()
    graph, outs = runtime.capture_graph(lambda: call(static_x), warmup=1)
    for x in xs[::-1]:
        with torch.no_grad():
            static_x.copy_(x)
        graph.replay()
        _check_calls_against_float64(*outs, static_x, res, w, b, g)
    dependent = torch.cuda.get_device_capability() >= (9, 0)
    plans = [plan for key, plan in batchnorm._PLANS.items() if key[0] in ("apply", "bwd_dx") and key[3] == C]
    assert plans and all(plan.kernel.options.get("launch_pdl", False) == dependent for plan in plans)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gpu_views(case, dtype_name, isolated):
    isolated("tests.test_batchnorm:view_case", case.arg, case.layout, dtype_name)


@pytest.mark.gpu
@pytest.mark.parametrize("residual,relu,two_outputs,second_stride", [
    (True, True, False, 1), (False, True, False, 1), (False, False, False, 1), (True, False, False, 1),
    (False, True, True, 1), (True, True, True, 2)])
def test_gpu_compile_fullgraph(residual, relu, two_outputs, second_stride):
    """torch.compile(fullgraph=True) traces through the op: same output, gradients and running statistics
    as the eager call path, with and without a residual and a ReLU, and for a ResNet block's two outputs (the
    second one subsampled as a 1x1 stride-2 shortcut reads it)."""
    torch._dynamo.reset()
    bn_eager = BatchNormAct2d(64, relu=relu).cuda().to(memory_format=torch.channels_last)
    bn_comp = BatchNormAct2d(64, relu=relu).cuda()
    bn_comp.load_state_dict(bn_eager.state_dict())
    for bn in (bn_eager, bn_comp):
        bn.fused, bn.two_outputs, bn.second_stride = True, two_outputs, second_stride
    x = torch.randn(64, 64, 16, 16, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    res = torch.randn_like(x) if residual else None
    compiled = torch.compile(bn_comp, fullgraph=True)

    def loss(y):  # a block's input is used twice: its two outputs get gradients of their own
        return (y[0].float().square().sum() + y[1].float().sum()) if two_outputs else y.float().square().sum()

    for _ in range(2):
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = bn_eager(xe, res), compiled(xc, res)
        for a, b in zip(ye if two_outputs else [ye], yc if two_outputs else [yc]):
            assert_close(b, a.double(), torch.bfloat16)
        loss(ye).backward()
        loss(yc).backward()
        assert_close(xc.grad, xe.grad.double(), torch.bfloat16)
    for (k, a), b in zip(bn_eager.state_dict().items(), bn_comp.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6), k
    assert_close(bn_comp.weight.grad, bn_eager.weight.grad.double(), torch.bfloat16)
    assert torch._dynamo.explain(bn_comp)(x, res).graph_break_count == 0


# ---------------------------------------------------------------------------------------------- op suite
def test_op_suite_cases_run_and_check():
    """bench/cases/batchnorm.py's interpreter cases pass the harness's float64 check on both backends."""
    from bench import harness
    from bench.cases import batchnorm as cases

    for case in cases.cases():
        rows = harness.run_case(case, harness.RunConfig(backends=["eager", "triton"], rep=1))
        timed = [r for r in rows if r["metric"] == "time_ms"]
        assert len(timed) == 2 and all(r["status"] == "ok" for r in timed), (case.label, rows)
        assert all(r["error_vs_fp64"] <= case.tolerance() for r in timed), case.label
