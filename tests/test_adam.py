"""Fused flat-buffer Adam vs torch.optim.Adam (weight decay as L2), partial-gradient reduction, device
step counter, errors before launch."""
import pytest
import torch

from triton_kernels.adam import FlatAdam, adam_step
from triton_kernels.testing import assert_close

from .conftest import DEVICE


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
    (lambda p, g, m, v: adam_step(torch.randn(20)[::2], g, m, v, 1), "params must be contiguous"),
    (lambda p, g, m, v: adam_step(p, g.to("meta"), m, v, 1), "grad is on meta"),
    (lambda p, g, m, v: adam_step(p, g, m, v, torch.ones(1, dtype=torch.int32)), "step has dtype"),
])
def test_bad_input_raises_before_launch(bad, match):
    p, g, m, v = (torch.randn(10) for _ in range(4))
    p0 = p.clone()
    with pytest.raises(ValueError, match=match):
        bad(p, g, m, v)
    assert torch.equal(p, p0)


@pytest.mark.gpu
def test_gpu_large_and_graph():
    n = 5_000_003
    p0 = torch.randn(n, device="cuda")
    grads = [torch.randn(n, device="cuda") for _ in range(3)]
    p_ref, _, _ = _torch_adam(p0, grads, lr=1e-3, weight_decay=1e-4)
    opt = FlatAdam(p0.clone(), lr=1e-3, weight_decay=1e-4)
    g = grads[0].clone()
    opt.step(g)  # tune outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step(g)
    for gi in grads[1:]:
        g.copy_(gi)
        graph.replay()
    assert_close(opt.params, p_ref.double(), torch.float32)
