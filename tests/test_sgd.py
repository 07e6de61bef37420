"""The fused SGD step (triton_kernels/sgd.py) against torch.optim.SGD in float64 over several steps: every
option, parameter layouts, gradients in another layout, first steps, state_dicts both ways, groups over the
per-launch tensor limit, NaN, bad input; bf16 and ResNet-18's parameters on the GPU."""
import copy

import pytest
import torch
from torch.optim.sgd import sgd as torch_sgd

from triton_kernels import sgd
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close

from .conftest import DEVICE

CL = torch.channels_last
OPTIONS = [dict(momentum=0.9, nesterov=True, weight_decay=5e-4), dict(momentum=0.9, dampening=0.1),
           dict(), dict(weight_decay=0.1, maximize=True), dict(momentum=0.5, weight_decay=0.01)]


def _params(dtype=torch.float32, device=DEVICE):
    return [torch.randn(8, 3, 3, 3, device=device).to(dtype).contiguous(memory_format=CL),
            torch.randn(300, device=device).to(dtype), torch.randn(5, 7, device=device).to(dtype),
            torch.randn(4, 6, 1, 1, device=device).to(dtype)]


def _train(opt_class, params, grads, lrs, **kw):
    opt = opt_class(params, lr=lrs[0], **kw)
    for lr, step_grads in zip(lrs, grads):
        for group in opt.param_groups:
            group["lr"] = lr  # what a scheduler does between steps
        for p, g in zip(params, step_grads):
            p.grad = None if g is None else g.to(p.dtype)
        opt.step()
    return opt


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_steps_match_torch_in_float64(options):
    """Four steps at changing learning rates against torch.optim.SGD in float64; the fp32 torch optimizer's
    own error sets the bar. The third parameter gets no gradient at the first step (its buffer starts later)."""
    start = _params()
    grads = [[torch.randn_like(p) for p in start] for _ in range(4)]
    grads[0][2] = None
    lrs = [0.1, 0.05, 0.2, 0.01]
    ours = [p.clone().requires_grad_() for p in start]
    torch_fp32 = [p.clone().requires_grad_() for p in start]
    ref = [p.double().requires_grad_() for p in start]
    _train(sgd.SGD, ours, grads, lrs, **options)
    _train(torch.optim.SGD, torch_fp32, grads, lrs, **options)
    _train(torch.optim.SGD, ref, grads, lrs, **options)
    for i, (o, t, r) in enumerate(zip(ours, torch_fp32, ref)):
        assert o.stride() == r.stride(), f"param {i} changed layout"
        assert_close(o.detach(), r.detach(), torch.float32, name=f"param {i}")
        ours_err, torch_err = ((q.detach().double() - r.detach()).abs().max() for q in (o, t))
        assert ours_err <= 4 * torch_err + 1e-7, f"param {i}: {ours_err} against torch fp32's {torch_err}"


def test_state_dict_interchanges_with_torch_sgd():
    """A torch SGD's state (momentum buffers) loads into ours and ours back into torch's; both continue alike."""
    start = _params()
    grads = [[torch.randn_like(p) for p in start] for _ in range(4)]
    a, b = ([p.clone().requires_grad_() for p in start] for _ in range(2))
    opt_a = _train(torch.optim.SGD, a, grads[:2], [0.1, 0.1], momentum=0.9, nesterov=True)
    _train(torch.optim.SGD, b, grads[:2], [0.1, 0.1], momentum=0.9, nesterov=True)
    ours = sgd.SGD(a, lr=0.1, momentum=0.9, nesterov=True)
    saved = copy.deepcopy(opt_a.state_dict())  # (a loaded state shares the saved tensors)
    ours.load_state_dict(copy.deepcopy(saved))
    for p, g in zip(a, grads[2]):
        p.grad = g.clone()
    ours.step()
    theirs = torch.optim.SGD(b, lr=0.1, momentum=0.9, nesterov=True)
    theirs.load_state_dict(copy.deepcopy(saved))
    for p, g in zip(b, grads[2]):
        p.grad = g.clone()
    theirs.step()
    for p, q in zip(a, b):
        assert_close(p.detach(), q.detach().double(), torch.float32)
    for p in b:  # a loaded buffer in another layout than its parameter's is taken in the parameter's
        theirs.state[p]["momentum_buffer"] = theirs.state[p]["momentum_buffer"].contiguous()
    c = [p.detach().clone().requires_grad_() for p in b]
    relaid, again = sgd.SGD(b, lr=0.1, momentum=0.9, nesterov=True), torch.optim.SGD(c, lr=0.1, momentum=0.9,
                                                                                      nesterov=True)
    relaid.load_state_dict(copy.deepcopy(theirs.state_dict()))
    again.load_state_dict(copy.deepcopy(theirs.state_dict()))
    for p, q, g in zip(b, c, grads[3]):
        p.grad, q.grad = g.clone(), g.clone()
    relaid.step()
    again.step()
    assert all(relaid.state[p]["momentum_buffer"].stride() == p.stride() for p in b)
    for p, q in zip(b, c):
        assert_close(p.detach(), q.detach().double(), torch.float32)
    back = torch.optim.SGD(a, lr=0.1, momentum=0.9, nesterov=True)
    back.load_state_dict(ours.state_dict())
    assert all(torch.equal(back.state[p]["momentum_buffer"], ours.state[p]["momentum_buffer"]) for p in a)


def test_gradient_in_another_layout_and_many_tensors():
    """A channels_last parameter with an NCHW gradient (copied into the parameter's layout), and 70 tensors in one
    launch; forced small blocks, so tensors span several chunks."""
    params = [torch.randn(4, 5, 3, 3, device=DEVICE).contiguous(memory_format=CL)] + \
             [torch.randn(37 + i, device=DEVICE) for i in range(69)]
    grads = [torch.randn(p.shape, device=DEVICE) for p in params]  # all contiguous
    ours = [p.clone() for p in params]
    bufs = sgd.sgd_step_(ours, grads, [None] * len(ours), 0.1, 0.9, config=Config({"BLOCK": 16}, 1, 1))
    bufs = sgd.sgd_step_(ours, grads, bufs, 0.1, 0.9, config=Config({"BLOCK": 16}, 1, 1))
    for p, q, g, b in zip(ours, params, grads, bufs):
        ref = q.double() - 0.1 * g.double() - 0.1 * (0.9 * g.double() + g.double())
        assert_close(p, ref, torch.float32)
        assert b.stride() == p.stride()
        assert_close(b, 1.9 * g.double(), torch.float32)


def test_mixed_dtypes_and_unaligned_tensors():
    """fp32 and fp16 parameters in one call (a launch per dtype); a parameter whose address is not a multiple of
    16 elements (a view at an odd offset: the kernel then makes no alignment claim); a moved parameter (p.data
    replaced) is stepped at its new address."""
    base = torch.randn(101, device=DEVICE)
    params = [base[3:50], torch.randn(33, device=DEVICE).half(), torch.randn(7, 5, device=DEVICE)]
    grads = [torch.randn(p.shape, device=DEVICE).to(p.dtype) for p in params]
    refs = [p.double() - 0.1 * g.double() for p, g in zip(params, grads)]
    sgd.sgd_step_(params, grads, [None] * 3, 0.1)
    for p, r in zip(params, refs):
        assert_close(p, r, p.dtype)
    moved = torch.nn.Parameter(torch.randn(40, device=DEVICE))
    opt = sgd.SGD([moved], lr=0.1)
    moved.grad = torch.ones(40, device=DEVICE)
    opt.step()
    moved.data = torch.zeros(40, device=DEVICE)
    opt.step()
    assert torch.equal(moved.detach(), torch.full((40,), -0.1, device=DEVICE))


@pytest.mark.parametrize("grad_dtype", [torch.float16, torch.bfloat16], ids=str)
def test_narrower_gradients_of_fp32_parameters(grad_dtype):
    """fp16 (bf16) gradients of fp32 parameters (a mixed-precision model's weight gradients) beside
    fp32 ones, in one group with momentum: every parameter steps exactly as with its gradient widened to fp32
    first (the kernel widens it as it loads it), first and later steps; the per-step check follows gradients
    whose dtype changes."""
    if grad_dtype == torch.bfloat16 and DEVICE == "cpu":
        pytest.skip("no bf16 in the interpreter")
    start = _params()
    low = [torch.nn.Parameter(p.clone()) for p in start]
    wide = [torch.nn.Parameter(p.clone()) for p in start]
    for p in low[:2]:
        p.grad_dtype = None  # any gradient dtype
    ours, ref = (sgd.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3) for ps in (low, wide))
    for step in range(3):
        grads = [torch.randn_like(p).to(grad_dtype) for p in start]
        for i, (p, q, g) in enumerate(zip(low, wide, grads)):
            p.grad = g if i < 2 and step != 1 else g.float()  # step 1: every gradient fp32
            q.grad = g.float()
        ours.step()
        ref.step()
        for i, (p, q) in enumerate(zip(low, wide)):
            assert torch.equal(p.detach(), q.detach()), f"step {step}, param {i}"


def test_empty_parameter_among_others():
    """A parameter with no elements is skipped by the launch but keeps its (empty) momentum buffer; the others
    step as torch's in float64, first and later steps."""
    params = [torch.randn(20, device=DEVICE), torch.empty(0, device=DEVICE), torch.randn(3, 4, device=DEVICE)]
    ref = [p.double() for p in params]
    bufs, ref_bufs = [None] * 3, [None] * 3
    for _ in range(2):
        grads = [torch.randn_like(p) for p in params]
        bufs = sgd.sgd_step_(params, grads, bufs, 0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
        torch_sgd(ref, [g.double() for g in grads], ref_bufs, lr=0.1, momentum=0.9, dampening=0.0,
                  weight_decay=0.01, nesterov=True, maximize=False, foreach=False)
    assert bufs[1].shape == (0,)
    for i, (p, r) in enumerate(zip(params, ref)):
        assert_close(p, r, torch.float32, name=f"param {i}")


def test_a_parameter_whose_data_changed_is_checked_again():
    """The class checks a group in full once, then compares cheap signatures: a parameter given new data of
    another shape (its old gradient kept) or another layout is caught, as in the first check."""
    p = torch.nn.Parameter(torch.randn(6, device=DEVICE))
    opt = sgd.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(6, device=DEVICE)
    opt.step()
    p.data = torch.randn(3, device=DEVICE)
    with pytest.raises(ValueError, match=r"grads\[0\] has shape"):
        opt.step()
    w = torch.nn.Parameter(torch.randn(2, 3, 4, 5, device=DEVICE))
    opt = sgd.SGD([w], lr=0.1)
    w.grad = torch.ones_like(w)
    opt.step()
    w.data = torch.randn(5, 4, 3, 2, device=DEVICE).permute(3, 2, 1, 0)  # the same shape, not dense in any layout
    with pytest.raises(ValueError, match=r"params\[0\] must be contiguous or channels_last"):
        opt.step()


def test_versions_move_and_packed_weights_follow():
    """The step bumps each parameter's and buffer's version counter, as torch's in-place update does, so a cache
    keyed by it (conv2d's packed weight) sees the new values instead of serving the old ones."""
    from triton_kernels import conv2d

    weight = torch.nn.Parameter(torch.randn(4, 3, 3, 3, device=DEVICE))
    packed = conv2d.packed_weight(weight).clone()
    versions = weight._version
    opt = sgd.SGD([weight], lr=0.5, momentum=0.9)
    weight.grad = torch.ones_like(weight)
    opt.step()
    assert weight._version > versions and opt.state[weight]["momentum_buffer"]._version > 0
    assert torch.equal(conv2d.packed_weight(weight), packed - 0.5)


def test_nan_propagates_like_torch():
    """A NaN gradient gives a NaN parameter and buffer; an inf parameter stays inf (no weight decay term)."""
    start = torch.tensor([1.0, 2.0, float("inf")], device=DEVICE)
    g = torch.tensor([float("nan"), 1.0, 1.0], device=DEVICE)
    ours, theirs = start.clone(), start.clone().requires_grad_()
    bufs = sgd.sgd_step_([ours], [g], [None], 0.1, 0.9)
    theirs.grad = g.clone()
    opt = torch.optim.SGD([theirs], lr=0.1, momentum=0.9)
    opt.step()
    assert torch.equal(ours.isnan(), theirs.detach().isnan()) and torch.equal(ours[1:], theirs.detach()[1:])
    assert torch.equal(bufs[0].isnan(), opt.state[theirs]["momentum_buffer"].isnan())


@pytest.mark.parametrize("bad,match", [
    (dict(lr=torch.tensor(0.1)), "lr must be a float"),
    (dict(lr=-1.0), "lr must be a float >= 0"),
    (dict(nesterov=True, momentum=0.0), "Nesterov momentum requires"),
    (dict(grads="shape"), "grads\\[0\\] has shape"),
    (dict(grads="dtype"), "grads\\[0\\]"),
    (dict(grads="wider"), "grads\\[0\\]"),
    (dict(params="strided"), "params\\[0\\] must be contiguous or channels_last"),
    (dict(bufs="shape"), "momentum_buffers\\[0\\] must have"),
])
def test_bad_input_raises(bad, match):
    p = torch.randn(4, 6, device=DEVICE)
    g = torch.randn(4, 6, device=DEVICE)
    params, grads, bufs = [p], [g], [None]
    if bad.get("grads") == "shape":
        grads = [torch.randn(6, 4, device=DEVICE)]
    if bad.get("grads") == "dtype":
        grads = [g.double()]
    if bad.get("grads") == "wider":  # a gradient wider than its (fp16) parameter
        params = [p.half()]
    if bad.get("params") == "strided":
        params = [torch.randn(4, 12, device=DEVICE)[:, ::2]]
    if bad.get("bufs") == "shape":
        bufs = [torch.randn(6, 4, device=DEVICE)]
    kw = {k: v for k, v in bad.items() if k in ("lr", "nesterov", "momentum")}
    before = params[0].clone()
    with pytest.raises(ValueError, match=match):
        sgd.sgd_step_(params, grads, bufs, kw.pop("lr", 0.1), **({"momentum": 0.9} | kw))
    assert torch.equal(params[0], before)  # nothing launched: the check comes first


@pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's dtype check")
def test_bfloat16_gradients_refused_on_the_interpreter():
    with pytest.raises(ValueError, match="grads\\[0\\].*interpreter"):
        sgd.sgd_step_([torch.randn(5)], [torch.randn(5).bfloat16()], [None], 0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_resnet18_parameters(dtype):
    """ResNet-18's 62 parameters (one launch), Nesterov with weight decay as the CIFAR recipe, five steps against
    torch.optim.SGD in float64 (bf16 parameters: their rounding each step sets the bar)."""
    from models.resnet import resnet18

    start = [p.detach().to(dtype) for p in resnet18().cuda().to(memory_format=CL).parameters()]
    grads = [[torch.randn_like(p, dtype=torch.float32) * 0.01 for p in start] for _ in range(5)]
    ours = [p.clone() for p in start]
    ref = [p.double() for p in start]
    _train(sgd.SGD, [p.requires_grad_() for p in ours], grads, [0.4, 0.3, 0.2, 0.1, 0.05], momentum=0.9,
           nesterov=True, weight_decay=5e-4)
    _train(torch.optim.SGD, [p.requires_grad_() for p in ref], grads, [0.4, 0.3, 0.2, 0.1, 0.05], momentum=0.9,
           nesterov=True, weight_decay=5e-4)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o.detach(), r.detach(), dtype, name=f"param {i}", scale=4)


def test_op_suite_case_runs_and_checks():
    """bench/cases/sgd.py's interpreter case passes the harness's float64 check on every backend (each steps its
    own copy of the inputs, so the first call of each is one step from the same values); its parameter list is
    ResNet-18's."""
    from bench import harness
    from bench.cases import sgd as cases

    assert len(cases.parameter_shapes("resnet18")) == 62
    for case in cases.cases():
        rows = harness.run_case(case, harness.RunConfig(backends=["eager", "eager-fused", "triton"], rep=2))
        timed = [r for r in rows if r["metric"] == "time_ms"]
        assert len(timed) == 3 and all(r["status"] == "ok" for r in timed), rows
