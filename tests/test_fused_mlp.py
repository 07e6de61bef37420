"""Fused deep-narrow MLP kernels (GloNet, MLP, ResNet-MLP with BN): forward and every gradient against a
float64 reference, odd batch sizes, strided inputs, poisoned outputs, errors before launch (CPU
interpreter); large depth, tf32 and torch.compile on the GPU."""
import copy
import inspect
import sys

import pytest
import torch
import triton
import triton.language as tl

from models.deep_mlp import FusedTrainer, build_model
from triton_kernels import fused_mlp, fused_resnet, grid_sync
from triton_kernels.testing import assert_close, poison_, rel_err, tolerance

from .conftest import DEVICE, GPU


def _check_model(name, B, width=16, strided=False, device=DEVICE, precision="ieee", training=True):
    """Fused forward + every gradient vs float64. Tolerance: the project's fp32 tolerance, or 4x the error
    of eager fp32 torch on the same inputs where the problem itself is ill-conditioned (batch norm over
    a handful of rows amplifies rounding by 1/std; near-cancelling sums such as d(head bias) = mean(2 (y - t))
    lose relative accuracy): 3x (10x with BN) the fp32 tolerance, still 30x below the tf32 one."""
    model = build_model(name, width=width, seed=B, device=device)
    ref = copy.deepcopy(model).cpu().double()
    model.backend, model.precision = "triton", precision
    model.train(training)
    ref.train(training)
    if not training:  # non-trivial running statistics
        with torch.no_grad():
            for bn in [m for m in ref.modules() if isinstance(m, torch.nn.BatchNorm1d)]:
                bn.running_mean.normal_()
                bn.running_var.uniform_(0.5, 2.0)
        model.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
    eager32 = copy.deepcopy(ref).float().to(device)
    x = torch.randn(B, 14 * 2, device=device)[:, ::2] if strided else torch.randn(B, 14, device=device)
    t = torch.randn(B, device=device)
    y = model(x)
    ((y - t) ** 2).mean().backward()
    yr = ref(x.double().cpu())
    ((yr - t.double().cpu()) ** 2).mean().backward()
    tf32 = precision == "tf32" and GPU
    # the eager baseline runs at the same precision (tf32 matmuls when the kernel uses tf32): its error
    # says how ill-conditioned the problem is at that precision
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        y32 = eager32(x)
        ((y32 - t) ** 2).mean().backward()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    base = 10 if name.startswith("Res") else 3  # fp32 rounding compounds through BN / long sums

    def check(out, expect, eager, what):
        tol = max(base * tolerance(torch.float32, tf32), (8 if name.startswith("Res") else 4) * rel_err(eager, expect))
        err = rel_err(out, expect)
        assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"

    check(y, yr, y32, "y")
    # the bias of a Linear followed by training-mode BN has a zero gradient: compare those in absolute terms
    scale = max(p.grad.double().norm().item() for p in ref.parameters())
    for (n, p), q, e in zip(model.named_parameters(), ref.parameters(), eager32.parameters()):
        assert p.grad is not None, n
        if name.startswith("Res") and training and (n.endswith("lin1.bias") or n.endswith("lin2.bias")):
            bound = max(1e-5 * scale, 4 * (e.grad.double().cpu() - q.grad).norm().item())
            assert (p.grad.double().cpu() - q.grad).norm().item() <= bound, n
        else:
            check(p.grad, q.grad, e.grad, f"d{n}")
    for (n, b), rb, eb in zip(model.named_buffers(), ref.buffers(), eager32.buffers()):
        if b.is_floating_point():
            check(b, rb, eb, n)
        else:
            assert torch.equal(b.cpu(), rb), n


@pytest.mark.parametrize("name", ["GloNet1", "GloNet3", "MLP1", "MLP4"])
@pytest.mark.parametrize("B", [1, 3, 17, 40])
def test_glonet_mlp_forward_backward(name, B):
    _check_model(name, B)


# (B = 2 is degenerate: BN maps any pair to -1, +1.) The interpreter runs one program over the whole
# batch, padded to a power of two: its time grows with B, so the deeper network gets the smaller ones
@pytest.mark.parametrize("name,B", [("ResNetMLP2", 5), ("ResNetMLP2", 17), ("ResNetMLP2", 33), ("ResNetMLP6", 5),
                                    ("ResNetMLP6", 17)])
def test_resnet_bn_train_forward_backward(name, B):
    _check_model(name, B)


@pytest.mark.parametrize("B", [3, 40])
def test_resnet_bn_eval_forward_backward(B):
    _check_model("ResNetMLP4", B, training=False)


def _check_nan_propagates(name, training, B, device=DEVICE):
    """A NaN feature in one row: the outputs and every gradient are NaN exactly where eager torch's are (the
    fused ReLU keeps NaN and its backward passes the gradient there, as torch.relu's)."""
    model = build_model(name, width=16, seed=3, device=device)
    eager = copy.deepcopy(model)
    model.backend = "triton"
    model.train(training)
    eager.train(training)
    x, t = torch.randn(B, 14, device=device), torch.randn(B, device=device)
    x[2, 5] = float("nan")
    outs = []
    for m in (model, eager):
        y = m(x)
        ((y - t) ** 2).mean().backward()
        outs.append([y.detach()] + [p.grad for p in m.parameters()])
    for ours, theirs in zip(*outs):
        assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    assert torch.isnan(outs[0][0][2])


@pytest.mark.parametrize("name,training", [("GloNet3", True), ("MLP4", True), ("ResNetMLP2", True),
                                           ("ResNetMLP2", False)])
def test_nan_input_propagates_as_torch(name, training):
    _check_nan_propagates(name, training, 7)


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("name", ["GloNet3", "ResNetMLP2"])
def test_wider(name, width):
    _check_model(name, 19, width=width)


@pytest.mark.parametrize("name", ["GloNet3", "ResNetMLP2"])
def test_strided_input(name):
    _check_model(name, 21, strided=True)


def test_other_in_features_padding():
    # 20 features -> KIN = 32; 3 features -> KIN = 16
    for IN in (3, 20):
        for kind, depth in (("glonet", 3), ("resnet", 2)):
            model = build_model(f"{'GloNet' if kind == 'glonet' else 'ResNetMLP'}{depth}", in_features=IN, seed=IN)
            ref = copy.deepcopy(model).double()
            model.backend = "triton"
            x = torch.randn(9, IN)
            y = model(x)
            y.sum().backward()
            yr = ref(x.double())
            yr.sum().backward()
            assert_close(y, yr, torch.float32, scale=10)
            w0 = model.blocks[0].weight if kind == "glonet" else model.stem.weight
            w0r = ref.blocks[0].weight if kind == "glonet" else ref.stem.weight
            assert_close(w0.grad, w0r.grad, torch.float32, scale=10)


def test_outputs_and_partials_fully_written():
    layout = fused_mlp.Layout("glonet", 14, 16, 3)
    params = torch.randn(layout.numel) * 0.3
    x, t = torch.randn(37, 14), torch.randn(37)
    out = fused_mlp.forward(layout, x, params, target=t)  # allocate once, then poison and reuse
    for k in ("y", "acts", "g", "loss_partials"):
        poison_(out[k])
    out = fused_mlp.forward(layout, x, params, target=t, out=out, config=out["config"])
    for k in ("y", "acts", "g", "loss_partials"):
        assert torch.isfinite(out[k]).all(), k
    part = poison_(torch.empty(3, layout.numel))  # 37 rows / BLOCK_M 16 -> 3 programs
    res = fused_mlp.backward(layout, x, params, out, target=t, partials=part, config=fused_mlp.ROW_INTERPRET)
    assert res["partials"].data_ptr() == part.data_ptr()
    assert torch.isfinite(part).all() and torch.isfinite(res["grad"]).all()
    # in-kernel MSE loss / gradient agree with autograd on the same parameters
    p64 = params.double().requires_grad_()
    y64 = _reference_glonet(layout, x.double(), p64)
    loss = ((y64 - t.double()) ** 2).mean()
    loss.backward()
    assert abs(out["loss_partials"].sum().item() / 37 - loss.item()) <= 1e-5 * loss.item()
    assert_close(res["grad"], p64.grad, torch.float32)


def test_resnet_exchange_counts_barriers_and_flags():
    # training-mode ResNet kernels count their grid-wide exchanges (one per BN layer) in device memory,
    # so a reused buffer never sees a stale tag; a timed-out wait is reported on the host
    model = build_model("ResNetMLP6", seed=1)
    tr = FusedTrainer(model)
    x, t = torch.randn(13, 14), torch.randn(13)
    tr.step(x, t)
    fwd, bwd = tr._fwd[13], tr._bwd[13]
    assert fwd["state"].tolist() == [6, 0] and bwd["sync"]["state"].tolist() == [6, 0]
    tr.step(x, t)
    assert fwd["state"].tolist() == [12, 0] and bwd["sync"]["state"].tolist() == [12, 0]
    tr.check()
    bwd["sync"]["state"][1] = 1
    with pytest.raises(RuntimeError, match="timed out"):
        tr.check()


def test_resnet_kernels_have_no_profiling_hooks():
    # the production kernels, their exchange helpers and the launchers take no profiler argument; the timed
    # build (bench.resnet_numerics) is the same source compiled with grid_sync.timed()'s exchange functions
    hooks = {"prof", "prof_ptr", "PROF", "profile", "t_start"}
    for fn in (fused_resnet._resnet_fwd_kernel, fused_resnet._resnet_bwd_kernel, fused_resnet._bn_fwd_layer,
               fused_resnet._bn_batch_stats, grid_sync.exchange, grid_sync.gather, grid_sync.barriers_begin,
               grid_sync.barriers_end):
        assert not hooks & set(inspect.signature(fn.fn).parameters), fn.fn.__name__
    for fn in (fused_mlp.forward, fused_mlp.backward, fused_resnet.launch_forward, fused_resnet.launch_backward):
        assert not hooks & set(inspect.signature(fn).parameters), fn.__name__
    timed_fwd, timed_bwd = fused_resnet.timed_kernels()
    assert timed_fwd.fn.__code__ is fused_resnet._resnet_fwd_kernel.fn.__code__
    assert timed_bwd.fn.__globals__["gather"].fn.__name__ == "_gather_timed"
    assert timed_fwd.fn.__globals__["barriers_begin"].fn.__name__ == "_barriers_begin_timed"
    assert fused_resnet._resnet_bwd_kernel.fn.__globals__["gather"] is grid_sync.gather


@triton.jit
def _rebind_value():
    return 1


@triton.jit
def _rebind_other_value():
    return 2


@triton.jit
def _rebind_kernel(out_ptr):
    tl.store(out_ptr + tl.program_id(0), _rebind_value())


def test_rebind_compiles_a_copy_against_other_helpers():
    twin = grid_sync.rebind(sys.modules[__name__], "test", _rebind_value=_rebind_other_value)
    out = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    twin._rebind_kernel[(1,)](out)
    _rebind_kernel[(2,)](out[1:])
    assert out.tolist() == [2, 1]


def _reference_glonet(layout, x, p):
    v = layout.views(p)
    h = torch.relu(x @ v["w_in"].t() + v["b_in"])
    g = h
    for i in range(layout.n_hidden):
        h = torch.relu(h @ v["w_hid"][i].t() + v["b_hid"][i])
        g = g + h
    return (g @ v["w_head"].t()).squeeze(-1) + v["b_head"]


def test_layout_views_cover_buffer():
    for kind, depth in (("glonet", 5), ("mlp", 1), ("resnet", 4)):
        lay = fused_mlp.Layout(kind, 14, 16, depth)
        flat = torch.arange(lay.numel, dtype=torch.float32)
        total = sum(v.numel() for v in lay.views(flat).values())
        assert total == lay.numel


def _resnet2(x, running):
    """The fused ResNet of depth 2 on x with a running-statistics buffer of ``running`` values."""
    layout = fused_mlp.Layout("resnet", 14, 16, 2)
    return fused_mlp.fused_mlp(layout, x, torch.randn(layout.numel, device=x.device),
                               torch.zeros(running, device=x.device))


@pytest.mark.parametrize("bad,match", [
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x.double(), p), "x has dtype"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x[:, :13], p), "x has 13 features"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x, p[:-1]), "params has"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x, p, precision="fp8"), "precision must be"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x[0], p), "x must have 2 dims"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x[:0], p), "at least one row"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x, p.to("meta")), "params is on meta"),
    (lambda L, x, p, r: fused_mlp.fused_mlp(L, x.requires_grad_(), p.requires_grad_()), "x requires grad"),
    (lambda L, x, p, r: fused_mlp.forward(L, x, p, target=torch.randn(3, device=x.device))
     if fused_mlp.validate(L, x, p, torch.randn(3, device=x.device)) else None, "target has 3 rows"),
    (lambda L, x, p, r: fused_mlp.Layout("resnet", 14, 16, 3), "must be even"),
    (lambda L, x, p, r: fused_mlp.Layout("glonet", 14, 24, 3), "width must be one of"),
    (lambda L, x, p, r: fused_mlp.Layout("densenet", 14, 16, 3), "kind must be one of"),
    (lambda L, x, p, r: _resnet2(x, 3), "running must be"),
    (lambda L, x, p, r: _resnet2(torch.randn(8192, 14, device=x.device), 64), "training-mode batch norm"),
    (lambda L, x, p, r: _resnet2(x[:1], 64), "at least 2 rows"),
])
def test_bad_input_raises_before_launch(bad, match):
    L = fused_mlp.Layout("glonet", 14, 16, 3)
    x, p = torch.randn(8, 14, device=DEVICE), torch.randn(L.numel, device=DEVICE)  # a GPU box meets the checks too
    with pytest.raises(ValueError, match=match):
        bad(L, x, p, None)


# ---------------------------------------------------------------------------------------------- GPU
def _check_resnet_on_own_masks(name, B, device=DEVICE, config=None):
    """Fused ResNet forward + every gradient against float64 evaluated with the fused run's own ReLU
    on/off states. Deep BN ResNets have ReLU inputs within rounding of 0; where fp32 and fp64 disagree on
    such a unit the gradient jumps (eager fp32 shows the same jumps: bench.resnet_numerics), so the
    arithmetic is checked on the piecewise-linear network the kernel actually took."""
    model = build_model(name, seed=B, device=device)
    ref = copy.deepcopy(model).cpu().double()
    flat, run = model.flatten_(), model.running_buffer()
    x, t = torch.randn(B, 14, device=device), torch.randn(B, device=device)
    out = fused_mlp.forward(model.layout, x, flat, target=t, running=run.clone(), update_running=False, config=config)
    res = fused_mlp.backward(model.layout, x, flat, out, target=t, config=config)
    grid_sync.check_sync(out, res["sync"])  # no exchange timed out
    h = ref.stem(x.double().cpu())
    for j, blk in enumerate(ref.blocks):
        a = blk.bn1(blk.lin1(h)) * (out["a"][j] > 0).cpu()
        h = (h + blk.bn2(blk.lin2(a))) * (out["hs"][j + 1] > 0).cpu()
    yr = ref.head(h).squeeze(-1)
    ((yr - t.double().cpu()) ** 2).mean().backward()
    gr = torch.cat([p.grad.reshape(-1) for _, _, p in ref.layout_parameters()])
    assert_close(out["y"], yr, torch.float32, scale=10)
    views, rviews = model.layout.views(res["grad"]), model.layout.views(gr)
    for k in ("w_in", "w_hid", "gamma", "beta", "w_head", "b_head"):
        assert_close(views[k], rviews[k], torch.float32, scale=30, name=f"d{k}")


@pytest.mark.gpu
@pytest.mark.parametrize("name,training", [("GloNet100", True), ("ResNetMLP50", True), ("ResNetMLP50", False)])
def test_gpu_nan_input_propagates_as_torch(name, training):
    _check_nan_propagates(name, training, 1024)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["GloNet200", "MLP50", "ResNetMLP200"])
@pytest.mark.parametrize("B", [1024, 1000, 129])
def test_gpu_deep(name, B):
    if name.startswith("Res"):
        _check_resnet_on_own_masks(name, B, device="cuda")
    else:
        _check_model(name, B, device="cuda")


def test_resnet_on_own_masks_cpu():
    _check_resnet_on_own_masks("ResNetMLP6", 13)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
@pytest.mark.parametrize("name", ["GloNet100", "ResNetMLP100"])
def test_gpu_tf32(name, precision):
    # tf32x3 (three tf32 products, error-compensated) is held to the fp32 tolerance
    _check_model(name, 1024, device="cuda", precision=precision)


@pytest.mark.parametrize("name", ["GloNet5", "ResNetMLP4"])
def test_tf32x3_accepted(name):
    _check_model(name, 13, precision="tf32x3")


@pytest.mark.gpu
@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("name", ["GloNet64", "ResNetMLP64"])
def test_gpu_wide(name, width):
    _check_model(name, 1000, width=width, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", fused_resnet.BN_CONFIGS, ids=str)
def test_gpu_resnet_every_exchange_config(cfg):
    # every training-mode tiling (8..63 programs exchanging batch statistics) against float64
    _check_resnet_on_own_masks("ResNetMLP6", 1000, device="cuda", config=cfg)


@pytest.mark.gpu
def test_gpu_resnet_timed_build_counts_and_matches():
    # the timed build computes what the production kernels compute (bitwise: same arithmetic, same exchange
    # order) and counts, per program, every exchange's wait (>= 1 poll each) within the kernel's duration
    model = build_model("ResNetMLP6", seed=3, device="cuda")
    flat, run = model.flatten_(), model.running_buffer()
    x, t = torch.randn(1000, 14, device="cuda"), torch.randn(1000, device="cuda")
    cfg = fused_resnet.BN_CONFIGS[0]
    out = fused_mlp.forward(model.layout, x, flat, target=t, running=run.clone(), update_running=False, config=cfg)
    res = fused_mlp.backward(model.layout, x, flat, out, target=t, config=cfg)
    y, xh = out["y"].clone(), out["xh"].clone()
    partials = torch.full_like(res["partials"], float("nan"))
    n_prog = -(-1000 // cfg.kwargs["BLOCK_M"])
    for counters in (fused_resnet.timed_forward(model.layout, x, flat, out, target=t, running=run.clone()),
                     fused_resnet.timed_backward(model.layout, x, flat, out, target=t, config=cfg,
                                                 partials=partials)):
        assert counters.shape == (n_prog, 2)
        wait_ns, polls, kernel_ns = counters[:, 0] >> 20, counters[:, 0] & ((1 << 20) - 1), counters[:, 1]
        assert (polls >= model.layout.depth).all() and (kernel_ns > 0).all() and (wait_ns <= kernel_ns).all()
    assert torch.equal(out["y"], y) and torch.equal(out["xh"], xh)
    assert torch.equal(partials, res["partials"])


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["GloNet20", "ResNetMLP20"])
def test_gpu_compile_fullgraph(name):
    torch._dynamo.reset()
    model = build_model(name, seed=0, device="cuda", backend="triton")
    x = torch.randn(256, 14, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    y = compiled(x)
    ref = copy.deepcopy(model).double()
    ref.backend = "eager"
    assert_close(y, ref(x.double()), torch.float32, scale=10)
    y.sum().backward()
    for p in model.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
