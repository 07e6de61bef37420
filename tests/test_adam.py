"""Fused flat-buffer Adam vs torch.optim.Adam (weight decay as L2), partial-gradient reduction, device
step counter, the update against float64 at a tight tolerance, every layout of every buffer (a
contiguous one, also offset by one element, is updated correctly; any other is refused naming the
argument), errors before launch."""
import pytest
import torch

from triton_kernels.adam import FlatAdam, adam_step
from triton_kernels.runtime import capture_graph
from triton_kernels.testing import assert_close

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, build, view_cases


def _torch_adam(p0, grads, **kw):
    p = p0.clone().requires_grad_()
    opt = torch.optim.Adam([p], **kw)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    st = opt.state[p]
    return p.detach(), st["exp_avg"], st["exp_avg_sq"]


@pytest.mark.parametrize("n", [1, 17, 1000, 5003])
@pytest.mark.parametrize("wd", [0.0, 1e-2])
@pytest.mark.parametrize("device_step", [False, True])
def test_matches_torch_adam(n, wd, device_step):
    kw = dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-7, weight_decay=wd)
    p0 = torch.randn(n, device=DEVICE)
    grads = [torch.randn(n, device=DEVICE) for _ in range(5)]
    p_ref, m_ref, v_ref = _torch_adam(p0, grads, **kw)
    p, m, v = p0.clone(), torch.zeros(n, device=DEVICE), torch.zeros(n, device=DEVICE)
    step_t = torch.zeros(1, device=DEVICE)
    for i, g in enumerate(grads):
        if device_step:
            step_t += 1
        adam_step(p, g, m, v, step_t if device_step else i + 1, lr=kw["lr"], betas=kw["betas"], eps=kw["eps"],
                  weight_decay=wd)
    assert_close(p, p_ref.double(), torch.float32, name="params")
    assert_close(m, m_ref.double(), torch.float32, name="exp_avg")
    assert_close(v, v_ref.double(), torch.float32, name="exp_avg_sq")


def test_partials_are_summed_and_stored():
    n, npart = 3001, 5
    part = torch.randn(npart, n, device=DEVICE)
    p0 = torch.randn(n, device=DEVICE)
    p_ref, _, _ = _torch_adam(p0, [part.sum(0)], lr=1e-2)
    opt = FlatAdam(p0.clone(), lr=1e-2)
    gout = torch.full((n,), float("nan"), device=DEVICE)
    opt.step(part, grad_out=gout)
    assert_close(gout, part.double().sum(0), torch.float32, name="reduced grad")
    assert_close(opt.params, p_ref.double(), torch.float32, name="params")
    sd = opt.state_dict()
    opt2 = FlatAdam(p0.clone(), lr=1.0)
    opt2.load_state_dict(sd)
    assert opt2.lr == 1e-2 and opt2.step_t.item() == 1.0


@pytest.mark.parametrize("bad,match", [
    (lambda p, g, m, v: adam_step(p.double(), g, m, v, 1), "params has dtype"),
    (lambda p, g, m, v: adam_step(p, g[:-1], m, v, 1), "grad has"),
    (lambda p, g, m, v: adam_step(p, g, m[:-1], v, 1), "exp_avg"),
    (lambda p, g, m, v: adam_step(p, g, m, v, 0), "step must be >= 1"),
    (lambda p, g, m, v: adam_step(p, g, m, v, 1, betas=(1.0, 0.9)), "betas"),
    (lambda p, g, m, v: adam_step(p, g, m, v, 1, lr=-1.0), "lr, eps"),
    (lambda p, g, m, v: adam_step(p, g, m, v, 1, lr=float("nan")), "lr, eps"),
    (lambda p, g, m, v: adam_step(p, g.new_empty(0, 10), m, v, 1), "at least one row of partials"),
    (lambda p, g, m, v: adam_step(torch.randn(20, device=p.device)[::2], g, m, v, 1), "params must be contiguous"),
    (lambda p, g, m, v: adam_step(p, g.to("meta"), m, v, 1), "grad is on meta"),
    (lambda p, g, m, v: adam_step(p, g, m, v, torch.ones(1, dtype=torch.int32, device=p.device)), "step has dtype"),
])
def test_bad_input_raises_before_launch(bad, match):
    p, g, m, v = (torch.randn(10, device=DEVICE) for _ in range(4))  # a GPU box meets the checks too
    p0 = p.clone()
    with pytest.raises(ValueError, match=match):
        bad(p, g, m, v)
    assert torch.equal(p, p0)


def _adam64(p, g, m, v, t, lr, betas, eps, weight_decay):
    """One Adam step in float64 (torch.optim.Adam's formula), g (NP, N) partials or (N,)."""
    p, m, v = p.double().cpu(), m.double().cpu(), v.double().cpu()
    g = g.double().cpu()
    g = (g.sum(0) if g.ndim == 2 else g) + weight_decay * p
    m = betas[0] * m + (1 - betas[0]) * g
    v = betas[1] * v + (1 - betas[1]) * g * g
    return p - lr / (1 - betas[0] ** t) * m / (v.sqrt() / (1 - betas[1] ** t) ** 0.5 + eps), m, v


def tight_case(betas, device_step: bool, device: str) -> None:
    """The update itself against float64 within a tenth of the fp32 tolerance, at steps 1 .. 5000. The
    parameters are small against the update, so that p + update rounds none of it away. The bias
    corrections 1 - beta^t computed in fp32 as 1 - exp(t log beta) were off by up to 8e-5 here."""
    n, lr, eps, wd = 1031, 1e-2, 1e-8, 1e-2
    for t in (1, 3, 100, 5000):
        p, g = torch.randn(n, device=device) * 1e-4, torch.randn(n, device=device)
        m, v = torch.randn(n, device=device) * 0.1, torch.rand(n, device=device) * 0.01
        p_ref, m_ref, v_ref = _adam64(p, g, m, v, t, lr, betas, eps, wd)
        p0 = p.clone()
        step = torch.full((1,), float(t), device=device) if device_step else t
        adam_step(p, g, m, v, step, lr=lr, betas=betas, eps=eps, weight_decay=wd)
        assert_close(p - p0, p_ref - p0.double().cpu(), torch.float32, scale=0.1, name=f"update at step {t}")
        assert_close(m, m_ref, torch.float32, name="exp_avg")
        assert_close(v, v_ref, torch.float32, name="exp_avg_sq")


@pytest.mark.parametrize("device_step", [True, False])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.9999)])
def test_update_matches_float64_tightly(betas, device_step):
    tight_case(betas, device_step, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("device_step", [True, False])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.9999)])
def test_gpu_update_matches_float64_tightly(betas, device_step):
    tight_case(betas, device_step, "cuda")


# every buffer in every layout: the kernel reads flat buffers, so a non-contiguous one must be refused
ADAM_ARGS = {"params": Arg((37,), broadcast=(0,), grad=False), "grad": Arg((3, 37), broadcast=(0,), grad=False),
             "exp_avg": Arg((37,), broadcast=(0,), grad=False), "exp_avg_sq": Arg((37,), broadcast=(0,), grad=False),
             "grad_out": Arg((37,), broadcast=(0,), grad=False)}


def view_case(arg: str, layout: str, device: str) -> None:
    """One buffer laid out as ``layout``: a contiguous view (also one offset by one element) gets the
    float64 update; any other is refused before launch with an error naming it."""
    built = build(ViewCase(arg, layout), ADAM_ARGS, torch.float32, device)
    built["exp_avg_sq"][0].abs_()  # a second moment is >= 0
    views = {name: view(base) for name, (base, view) in built.items()}
    kw = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=1e-2)
    if not views[arg or "params"].is_contiguous():
        before = {name: base.clone() for name, (base, _) in built.items()}
        with pytest.raises(ValueError, match=f"{arg} must be contiguous"):
            adam_step(views["params"], views["grad"], views["exp_avg"], views["exp_avg_sq"], 4,
                      grad_out=views["grad_out"], **kw)
        for name, (base, _) in built.items():
            assert torch.equal(base, before[name]), f"{name} was written before the error"
        return
    p_ref, m_ref, v_ref = _adam64(views["params"], views["grad"], views["exp_avg"], views["exp_avg_sq"], 4, **kw)
    adam_step(views["params"], views["grad"], views["exp_avg"], views["exp_avg_sq"], 4, grad_out=views["grad_out"],
              **kw)
    assert_close(views["params"], p_ref, torch.float32, name=f"{arg}-{layout}: params")
    assert_close(views["exp_avg"], m_ref, torch.float32, name=f"{arg}-{layout}: exp_avg")
    assert_close(views["exp_avg_sq"], v_ref, torch.float32, name=f"{arg}-{layout}: exp_avg_sq")
    assert_close(views["grad_out"], views["grad"].double().cpu().sum(0), torch.float32,
                 name=f"{arg}-{layout}: grad_out")


@pytest.mark.parametrize("case", view_cases(ADAM_ARGS), ids=str)
def test_views(case):
    view_case(case.arg, case.layout, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("case", view_cases(ADAM_ARGS), ids=str)
def test_gpu_views(case, isolated):
    isolated("tests.test_adam:view_case", case.arg, case.layout, "cuda")


def test_step_tensor_must_hold_one_element():
    p, g, m, v = (torch.randn(10, device=DEVICE) for _ in range(4))
    with pytest.raises(ValueError, match="step must hold one element"):
        adam_step(p, g, m, v, torch.ones(2, device=DEVICE))


@pytest.mark.gpu
def test_gpu_large_and_graph():
    n = 5_000_003
    p0 = torch.randn(n, device="cuda")
    grads = [torch.randn(n, device="cuda") for _ in range(3)]
    p_ref, _, _ = _torch_adam(p0, grads, lr=1e-3, weight_decay=1e-4)
    opt = FlatAdam(p0.clone(), lr=1e-3, weight_decay=1e-4)
    g = grads[0].clone()
    graph, _ = capture_graph(lambda: opt.step(g), warmup=1)  # the warm-up step tunes outside the capture
    for gi in grads[1:]:
        g.copy_(gi)
        graph.replay()
    assert_close(opt.params, p_ref.double(), torch.float32)
