"""Op registration (triton_kernels/op_registration.py). On the CPU every op is an opaque custom op whose fake
implementation skips its launches, so torch.compile(fullgraph=True) runs them: here each op family compiled
(aot_eager) gives its eager call's outputs and every gradient bit for bit, and so does a training step of each
triton-backend model. The GPU's compile tests (traced
kernels) live beside each op's other GPU tests."""
import pytest
import torch
import triton
import triton.language as tl
from torch._subclasses.fake_tensor import FakeTensorMode

from torch.nn import functional

from models.char_cnn import PAD, CharCNN
from models.deep_mlp import build_model
from models.layers import CrossEntropyLoss, LayerNorm, LayerNormReLUMaxPool, Linear, LogSoftmax, Softmax
from models.resnet import Conv2d, ResNet
from triton_kernels import batchnorm, conv2d, pool_head, softmax_regression
from triton_kernels.runtime import INTERPRET, launch

CL = torch.channels_last
needs_interpreter = pytest.mark.skipif(not INTERPRET, reason="the interpreter's registration (the GPU traces kernels)")


def _bn(residual: bool, relu: bool, two_outputs: bool):
    running_mean, running_var = torch.zeros(8), torch.ones(8)

    def fn(x, weight, bias, r):
        y = batchnorm.batch_norm(x, running_mean, running_var, weight, bias, True, 0.1, 1e-5,
                                 residual=r if residual else None, relu=relu, two_outputs=two_outputs)
        return y[0] + 2 * y[1] if two_outputs else y  # both outputs' gradients reach the op

    return fn, [torch.randn(2, 8, 3, 3).contiguous(memory_format=CL), torch.rand(8) + 0.5, torch.randn(8),
                torch.randn(2, 8, 3, 3).contiguous(memory_format=CL)]


def _cases():
    target = torch.randint(0, 16, (4,))
    cross_entropy = CrossEntropyLoss(label_smoothing=0.1)
    return {
        "linear_relu": (Linear(8, 16, activation="relu"), [torch.randn(4, 8)]),
        "layer_norm": (LayerNorm(16), [torch.randn(4, 16)]),
        "layer_norm_relu_maxpool": (LayerNormReLUMaxPool([4, 12]), [torch.randn(2, 4, 12)]),
        "softmax": (Softmax(dim=-1), [torch.randn(3, 40)]),  # (rows of 10-16 are test_overhead's)
        "log_softmax": (LogSoftmax(dim=-1), [torch.randn(3, 40)]),
        "cross_entropy": (lambda x: cross_entropy(x, target), [torch.randn(4, 16)]),
        "batch_norm_relu": _bn(False, True, False),
        "batch_norm_add_relu": _bn(True, True, False),
        "batch_norm": _bn(False, False, False),
        "batch_norm_two_outputs": _bn(False, True, True),
        "pool_head": (pool_head.pool_head, [torch.randn(2, 16, 2, 2).contiguous(memory_format=CL),
                                            torch.randn(10, 16), torch.randn(10)]),
        "conv2d_tiled_add_relu": (lambda x, w, b, r: conv2d.conv2d(x, w, b, 1, 1, residual=r, activation="relu"),
                                  [torch.randn(2, 16, 4, 4).contiguous(memory_format=CL), torch.randn(16, 16, 3, 3),
                                   torch.randn(16), torch.randn(2, 16, 4, 4)]),
        "conv2d_flat_stride2": (lambda x, w: conv2d.conv2d(x, w, None, 2, 1),  # the flat-K weight gradient
                                [torch.randn(2, 3, 6, 6).contiguous(memory_format=CL), torch.randn(16, 3, 3, 3)]),
    }


CASES = list(_cases())


def _run(fn, inputs):
    leaves = [t.clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.float().square().sum().backward()
    return [out.detach()] + [t.grad for t in leaves]


@needs_interpreter
@pytest.mark.parametrize("name", CASES)
def test_compiled_op_equals_its_eager_call(name):
    fn, inputs = _cases()[name]
    torch._dynamo.reset()
    eager = _run(fn, inputs)
    compiled = _run(torch.compile(fn, backend="aot_eager", fullgraph=True), inputs)
    for what, e, c in zip(["output"] + [f"grad {i}" for i in range(len(inputs))], eager, compiled):
        assert (e is None) == (c is None), what
        assert e is None or torch.equal(c, e), what


def _inference_cases():
    running_mean, running_var, weight, bias = torch.randn(8), torch.rand(8) + 0.5, torch.rand(8), torch.randn(8)
    conv_weight, conv_bias = torch.randn(8, 8, 3, 3), torch.randn(8)
    return {
        "conv2d_bn_stats": (lambda x: conv2d.conv2d_bn_stats(x, conv_weight, conv_bias, 1, 1),
                            torch.randn(2, 8, 4, 4).contiguous(memory_format=CL)),
        "batch_norm_inference_add_relu": (
            lambda x: batchnorm.batch_norm(x, running_mean, running_var, weight, bias, False, residual=x.flip(0),
                                           relu=True), torch.randn(2, 8, 3, 3)),
    }


@needs_interpreter
@pytest.mark.parametrize("name", list(_inference_cases()))
def test_compiled_inference_op_equals_its_eager_call(name):
    fn, x = _inference_cases()[name]
    torch._dynamo.reset()
    with torch.no_grad():
        eager, compiled = fn(x), torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
    for e, c in zip(*((out if isinstance(out, (tuple, list)) else (out,)) for out in (eager, compiled))):
        assert torch.equal(c, e)


def _resnet_every_conv_on_triton():
    model = ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16), backend="triton")
    for m in model.modules():
        if isinstance(m, Conv2d):
            m.impl = "triton"  # the stem's flat-K kernels, the tiled kernel elsewhere
    labels = torch.randint(0, 10, (2,))
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=CL)
    return model, x, lambda out: functional.cross_entropy(out, labels)


def _square_sum(out):
    return out.square().sum()


def _char_cnn():
    labels = torch.randint(0, 4, (2,))
    return (CharCNN(length=123, channels=4, fc=8, dropout=0.0, backend="triton"),
            torch.randint(0, PAD + 1, (2, 123), dtype=torch.uint8), lambda out: functional.cross_entropy(out, labels))


MODELS = {
    "resnet_every_conv_on_triton": _resnet_every_conv_on_triton,
    "char_cnn": _char_cnn,
    "glonet": lambda: (build_model("GloNet4", backend="triton", seed=0), torch.randn(8, 14), _square_sum),
    "resnet_mlp": lambda: (build_model("ResNetMLP4", backend="triton", seed=0), torch.randn(8, 14), _square_sum),
}


@needs_interpreter
@pytest.mark.parametrize("name", MODELS)
def test_compiled_triton_model_equals_its_eager_step(name):
    """A training step of a triton-backend model under torch.compile(fullgraph=True): output, every gradient and
    every buffer (running statistics) equal the uncompiled model's step from the same state; then its eval output."""
    torch.manual_seed(0)
    model, x, loss_fn = MODELS[name]()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    torch._dynamo.reset()
    steps = []
    for fn in (model, torch.compile(model, backend="aot_eager", fullgraph=True)):
        model.load_state_dict(start)
        model.zero_grad(set_to_none=True)
        out = fn(x)
        loss_fn(out).backward()
        steps.append([out.detach()] + [p.grad for p in model.parameters()] + [b.clone() for b in model.buffers()])
    for i, (eager, compiled) in enumerate(zip(*steps)):
        assert torch.equal(compiled, eager), f"output / gradient / buffer {i}"
    model.eval()  # the inference paths (running statistics, packed weights)
    with torch.no_grad():
        assert torch.equal(torch.compile(model, backend="aot_eager", fullgraph=True)(x), model(x)), "eval output"


@needs_interpreter
def test_compiled_softmax_regression_steps_equal_eager_steps():
    """The fused SGD step (an op that updates its arguments in place) compiled: the same weights after 3 steps."""
    x, labels, perm = torch.rand(64, 20), torch.randint(0, 10, (64,)), torch.randperm(64)
    weight, bias = torch.randn(10, 20) * 0.1, torch.randn(10) * 0.1
    state = [(weight.clone(), bias.clone(), softmax_regression.StepBuffers.allocate(16, "cpu")) for _ in range(2)]
    torch._dynamo.reset()
    step = lambda w, b, buf: softmax_regression.sgd_step(w, b, x, labels, perm, buf, 16, 0.1)  # noqa: E731
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    for _ in range(3):
        step(*state[0])
        compiled(*state[1])
    assert torch.equal(state[1][0], state[0][0]) and torch.equal(state[1][1], state[0][1])
    assert int(state[1][2].step.item()) == 3


@needs_interpreter
def test_compiled_cross_entropy_checks_its_targets():
    """The CPU's default host check of the targets' range runs in the compiled op as in an eager call."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, t: CrossEntropyLoss()(x, t), backend="aot_eager", fullgraph=True)
    with pytest.raises(ValueError, match="class index 16 outside"):
        compiled(torch.randn(4, 16), torch.tensor([0, 16, 1, 2]))


@triton.jit
def _fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 1.0, mask=offs < n)


@needs_interpreter
def test_a_launch_traced_outside_an_op_is_an_error():
    """A kernel launched on fake tensors outside an op's fake implementation would leave its output
    unwritten in the compiled graph: it raises, naming what to do."""
    with FakeTensorMode():
        y = torch.empty(8)
        with pytest.raises(RuntimeError, match="outside a registered op"):
            launch(_fill_kernel, (1,), y, 8, BLOCK=8)
    y = torch.zeros(8)
    launch(_fill_kernel, (1,), y, 8, BLOCK=8)  # real tensors: launched
    assert bool((y == 1).all())
