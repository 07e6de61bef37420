"""foreach_cast / cast_parameters: every tensor equals ``Tensor.to`` bit for bit with its shape and strides
(contiguous, channels_last, empty, one element, more tensors than one launch takes), outputs poisoned
before the launch; gradients come back in each tensor's dtype and layout (float64 inputs: the cast's
backward is exact), None for an output not used; bad input raises naming the argument; the op suite's case
passes the harness's check. On the GPU: bf16, the casts inside a CUDA graph, every launch config."""
import pytest
import torch

from triton_kernels import foreach_cast as fc
from triton_kernels.runtime import capture_graph

from .conftest import DEVICE

SHAPES = [(5,), (300,), (1,), (0,), (7, 3, 3, 3), (16, 4, 3, 3), (2, 33)]


def _tensors(dtype=torch.float32, shapes=SHAPES, channels_last=True):
    out = []
    for s in shapes:
        t = torch.randn(s, device=DEVICE, dtype=dtype) * 100
        if channels_last and len(s) == 4 and s[0] % 2:
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out


def _poisoned_empty(monkeypatch, value):
    """torch.empty inside the launcher returns NaN / value-filled buffers: every element must be written."""
    real = torch.empty

    def empty(*args, **kw):
        t = real(*args, **kw)
        return t.fill_(value) if t.is_floating_point() else t

    monkeypatch.setattr(fc.torch, "empty", empty)


@pytest.mark.parametrize("dst", [torch.float16, torch.float64, torch.float32])
def test_matches_tensor_to(dst, monkeypatch):
    _poisoned_empty(monkeypatch, float("nan"))
    srcs = _tensors()
    outs = fc.foreach_cast(srcs, dst)
    for s, o in zip(srcs, outs):
        assert o.dtype == dst and o.shape == s.shape and o.stride() == s.stride()
        assert torch.equal(o, s.to(dst)), s.shape


def test_more_tensors_than_one_launch_and_special_values():
    srcs = [torch.randn(i % 7 + 1, device=DEVICE) for i in range(fc.MAX_TENSORS + 6)]
    srcs[3][0] = float("nan")
    srcs[4][0] = float("inf")
    srcs[5][0] = 1e6  # overflows fp16 to inf, as Tensor.to
    outs = fc.foreach_cast(srcs, torch.float16)
    for s, o in zip(srcs, outs):
        assert torch.equal(o, s.half()) or torch.allclose(o, s.half(), equal_nan=True)


@pytest.mark.parametrize("block", [32, 256])
def test_forced_configs(block):
    srcs = _tensors()
    outs = fc.foreach_cast(srcs, torch.float16, config=fc.Config({"BLOCK": block}, 4, 1))
    assert all(torch.equal(o, s.half()) for s, o in zip(srcs, outs))


def test_cast_parameters_gradients_float64():
    params = [t.double().requires_grad_() for t in _tensors()]
    params[2].requires_grad_(False)
    casts = fc.cast_parameters(params, torch.float32)
    assert all(c.dtype == torch.float32 and c.stride() == p.stride() for c, p in zip(casts, params))
    weights = [torch.randn(c.shape, device=DEVICE) for c in casts]
    loss = sum((c * w).sum() for i, (c, w) in enumerate(zip(casts, weights)) if i != 5)  # output 5 unused
    loss.backward()
    for i, (p, w) in enumerate(zip(params, weights)):
        if i == 2:
            assert p.grad is None
        elif i == 5:
            assert p.grad is None or not p.grad.any()
        else:
            assert p.grad.dtype == torch.float64 and p.grad.stride() == p.stride()
            assert torch.equal(p.grad, w.double())


def test_a_parameter_taking_narrow_gradients_gets_them_uncast():
    """A leaf whose grad_dtype is the cast's dtype (or None: any) keeps the gradient as it comes; the others
    get theirs cast back to their own dtype."""
    params = [torch.randn(3, 4, device=DEVICE, requires_grad=True) for _ in range(3)]
    params[0].grad_dtype = torch.float16
    params[1].grad_dtype = None
    casts = fc.cast_parameters(params, torch.float16)
    weights = [torch.randn(c.shape, device=DEVICE).half() for c in casts]
    sum((c * w).float().sum() for c, w in zip(casts, weights)).backward()
    assert [p.grad.dtype for p in params] == [torch.float16, torch.float16, torch.float32]
    for p, w in zip(params, weights):
        assert torch.equal(p.grad.float(), w.float())


def test_gradient_in_another_layout_comes_back_in_the_parameters():
    p = torch.randn(3, 4, 3, 3, device=DEVICE, requires_grad=True)  # contiguous
    (c,) = fc.cast_parameters([p], torch.float32)
    g = torch.randn(3, 4, 3, 3, device=DEVICE).contiguous(memory_format=torch.channels_last)
    c.backward(g)
    assert p.grad.stride() == p.stride() and torch.equal(p.grad, g)


def test_bad_inputs():
    t = torch.randn(4, device=DEVICE)
    with pytest.raises(ValueError, match="non-empty"):
        fc.foreach_cast([], torch.float16)
    with pytest.raises(ValueError, match="tensors"):
        fc.foreach_cast(t, torch.float16)
    with pytest.raises(ValueError, match=r"tensors\[1\] must be a torch.Tensor"):
        fc.foreach_cast([t, 3.0], torch.float16)
    with pytest.raises(ValueError, match=r"tensors\[1\] must be contiguous or channels_last"):
        fc.foreach_cast([t, torch.randn(4, 6, device=DEVICE)[:, ::2]], torch.float16)
    with pytest.raises(ValueError, match=r"tensors\[0\] has dtype torch.int64"):
        fc.foreach_cast([torch.arange(3, device=DEVICE)], torch.float16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        fc.foreach_cast([t], torch.int32)
    with pytest.raises(ValueError, match="dtype must be one of"):
        fc.cast_parameters([t], torch.int32)


@pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's dtypes")
def test_bfloat16_refused_on_the_interpreter():
    with pytest.raises(ValueError, match="interpreter"):
        fc.foreach_cast([torch.randn(4)], torch.bfloat16)
    with pytest.raises(ValueError, match=r"tensors\[0\] has dtype torch.bfloat16"):
        fc.foreach_cast([torch.randn(4).bfloat16()], torch.float32)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("config", [None] + fc.CONFIGS)
def test_gpu_bfloat16_both_ways(config):
    srcs = _tensors(shapes=SHAPES + [(512, 512, 3, 3), (64, 3, 3, 3)])
    outs = fc.foreach_cast(srcs, torch.bfloat16, config=config)
    assert all(torch.equal(o, s.bfloat16()) and o.stride() == s.stride() for s, o in zip(srcs, outs))
    back = fc.foreach_cast(outs, torch.float32, config=config)
    assert all(torch.equal(b, o.float()) for o, b in zip(outs, back))


@pytest.mark.gpu
def test_gpu_under_a_cuda_graph():
    srcs = _tensors(shapes=[(64, 64, 3, 3), (128, 64, 3, 3), (10,)])
    fc.foreach_cast(srcs, torch.bfloat16)  # compile and tune outside the capture
    graph, outs = capture_graph(lambda: fc.foreach_cast(srcs, torch.bfloat16))
    for s in srcs:
        s.normal_()
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(o, s.bfloat16()) for s, o in zip(srcs, outs))


def test_op_suite_case_runs_and_checks():
    """bench/cases/foreach_cast.py's interpreter case passes the harness's check (exact: a cast has one answer)
    on both backends; its weight list is ResNet-18's."""
    from bench import harness
    from bench.cases import foreach_cast as cases

    assert len(cases.conv_weight_shapes((2, 2, 2, 2))) == 19 and len(cases.conv_weight_shapes((3, 4, 6, 3))) == 35
    for case in cases.cases():
        rows = harness.run_case(case, harness.RunConfig(backends=["eager", "triton"], rep=1))
        timed = [r for r in rows if r["metric"] == "time_ms"]
        assert len(timed) == 2 and all(r["status"] == "ok" and r["error_vs_fp64"] == 0 for r in timed), rows
