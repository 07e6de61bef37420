"""CIFAR ResNet: the model's backends against float64 and each other, state_dicts, BN folding; the data
path (tiny files in every CIFAR-10 format, the epoch plan, GPU-resident vs DataLoader batches, DDP
shards); bench.resnet: resume after a SIGKILL mid-epoch ends exactly like an uninterrupted run, 2-process
gloo DDP equals one process on the same global batch, the timing / sweep / profiler / scaling modes
(CPU, tiny widths); on the GPU, ResNet-18 in bf16 on the triton backend against eager and under
torch.compile(fullgraph=True)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bench.resnet
from bench import resnet_data
from bench.data import cifar10
from models.resnet import BatchNormAct2d, ResNet, compile_model, fold_batch_norms, resnet
from triton_kernels import graphs
from triton_kernels.testing import assert_close, rel_err

from .conftest import DEVICE
from .fp32_step import Fp32StepBounds

REPO = Path(__file__).resolve().parents[1]
TINY = (4, 8, 8, 16)
TINY_ARGS = ["--widths", "4,8,8,16", "--no-progress", "--workers", "0"]


@pytest.fixture(autouse=True)
def _one_thread():
    """Other test processes share the CPU: torch's OpenMP threads spin-wait when oversubscribed."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TRITON_PLAYGROUND_AUTOTUNE="0")


# ---------------------------------------------------------------------------------------------- model
def _pair(**kw):
    torch.manual_seed(0)
    eager = ResNet((1, 1, 1, 1), widths=TINY, **kw).to(DEVICE)
    fused = ResNet((1, 1, 1, 1), widths=TINY, backend="triton", **kw).to(DEVICE)
    fused.load_state_dict(eager.state_dict())
    for m in eager.modules():  # non-trivial affine parameters
        if isinstance(m, BatchNormAct2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
    fused.load_state_dict(eager.state_dict())
    return eager, fused


@pytest.fixture
def no_cudnn_tf32():
    """cuDNN's TF32 off: it picks TF32 for some fp32 convolutions and not for others (a subsampled shortcut's
    1x1 stride-1 weight gradient, but not the same layer's at stride 2), which says nothing of our kernels."""
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = tf32


def test_triton_backend_matches_float64(no_cudnn_tf32):
    """Training-mode forward and every parameter gradient of the triton backend against the eager model
    in float64; the eager model in fp32 as the bar (a relative error within 4x of torch's own)."""
    eager, fused = _pair()
    ref = ResNet((1, 1, 1, 1), widths=TINY).double().to(DEVICE)
    ref.load_state_dict(eager.state_dict())
    x = torch.randn(4, 3, 8, 8, device=DEVICE)
    g = None
    for step in range(2):  # the first call of each layer's signature takes the general paths, the second the fast
        models = (("ref", ref), ("eager", eager), ("fused", fused))
        outs = {name: m(x.double() if name == "ref" else x) for name, m in models}
        err_e, err_f = rel_err(outs["eager"], outs["ref"]), rel_err(outs["fused"], outs["ref"])
        assert err_f <= max(4 * err_e, 1e-5), (step, err_f, err_e)
        g = torch.randn_like(outs["ref"]) if g is None else g
        for name, m in models:
            m.zero_grad(set_to_none=True)
            outs[name].backward(g.to(outs[name].dtype))
        for (name, p_ref), p_e, p_f in zip(ref.named_parameters(), eager.parameters(), fused.parameters()):
            e, f = rel_err(p_e.grad, p_ref.grad), rel_err(p_f.grad, p_ref.grad)
            assert f <= max(4 * e, 1e-5), (step, name, f, e)
        for (name, b_ref), b_f in zip(ref.named_buffers(), fused.buffers()):
            if b_ref.is_floating_point():
                assert rel_err(b_f, b_ref) <= 1e-5, (step, name)
            else:
                assert torch.equal(b_f, b_ref), (step, name)


def test_downsampling_blocks_get_the_subsample():
    """On the triton backend the batch norm that feeds a block with a 1x1 stride-2 shortcut hands the shortcut
    y[:, :, ::2, ::2] (second_stride 2), which it convolves at stride 1, on the general and the fast path, and
    the block's bn2 runs with the shortcut's batch norm as one pair; the eager backend keeps one output
    everywhere. (test_triton_backend_matches_float64 checks the values.)"""
    eager, fused = _pair()
    strides = {n: m.second_stride for n, m in fused.named_modules() if isinstance(m, BatchNormAct2d)}
    assert {n for n, s in strides.items() if s != 1} == {"layer1.0.bn2", "layer2.0.bn2", "layer3.0.bn2"}
    assert {strides[n] for n in ("layer1.0.bn2", "layer2.0.bn2", "layer3.0.bn2")} == {2}
    assert all(m.second_stride == 1 and not m.two_outputs for m in eager.modules() if isinstance(m, BatchNormAct2d))
    nodes = []  # the block's bn2 and its shortcut's batch norm run as one pair on the fast path
    fused.layer2[0].register_forward_hook(lambda m, args, out: nodes.append(type(out[0].grad_fn).__name__))
    conv = fused.layer2[0].downsample[0]
    seen, subsampled = [], conv.forward_subsampled
    conv.forward_subsampled = lambda x: seen.append(tuple(x.shape)) or subsampled(x)
    fused.to(memory_format=torch.channels_last)  # as bench.resnet trains: the pair needs both inputs in one layout
    x = torch.randn(4, 3, 8, 8, device=DEVICE).to(memory_format=torch.channels_last)
    for _ in range(3):  # general paths, then the fast paths (the pair's once its two calls are known in the
        fused(x).sum().backward()  # layouts of the fast calls around it)
    assert seen == [(4, 4, 4, 4)] * 3 and nodes[2] == "_PairNodeBackward"
    z = torch.randn(2, 4, 7, 7, device=DEVICE)
    assert torch.allclose(subsampled(z[:, :, ::2, ::2]), conv(z), rtol=1e-5, atol=1e-6)


def _prologue_pair(device, dtype):
    """One autocast training step of the triton backend with the one-launch prologue (counters, weight
    casts) and without: outputs, gradients and buffers must be equal bit for bit. Returns whether the
    prologue's casts reached the convolutions."""
    torch.manual_seed(0)
    on, off, warm = (ResNet((1, 1, 1, 1), widths=TINY, backend="triton").to(device) for _ in range(3))
    off.load_state_dict(on.state_dict())
    off.one_launch_prologue = False
    seen = []
    on.layer1[0].conv1.register_forward_pre_hook(lambda m, args: seen.append(m.cast_weight is not None))
    x = torch.randn(4, 3, 8, 8, device=device)
    with torch.autocast(torch.device(device).type, dtype=dtype):  # both compared calls take the fast paths
        warm(x).float().sum().backward()
    outs = []
    for model in (on, off):
        with torch.autocast(torch.device(device).type, dtype=dtype):
            out = model(x)
        out.float().square().sum().backward()
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    for (name, p), q in zip(on.named_parameters(), off.parameters()):
        assert p.grad.dtype == p.dtype and torch.equal(p.grad, q.grad), name
    for (name, b), c in zip(on.named_buffers(), off.buffers()):
        assert torch.equal(b, c), name
    assert on.bn1.num_batches_tracked.item() == 1 and not on.bn1.counted
    assert on.layer1[0].conv1.cast_weight is None  # set for the length of one forward only
    return seen == [True]


def test_one_launch_prologue_equals_per_layer_casts():
    """fp16 autocast on the CPU (the interpreter has no bf16)."""
    assert _prologue_pair(DEVICE if DEVICE == "cpu" else "cpu", torch.float16)


def test_low_precision_grads_keep_the_cast_weights_gradients_narrow():
    """low_precision_grads under fp16 autocast: the weights the prologue casts get fp16 gradients, equal to the
    fp32 ones of the same step without it (which are those fp16 values widened); every other parameter keeps
    fp32. A step without autocast, and switching the flag off, give fp32 gradients again."""
    torch.manual_seed(0)
    low, wide, warm = (ResNet((1, 1, 1, 1), widths=TINY, backend="triton") for _ in range(3))
    wide.load_state_dict(low.state_dict())
    low.low_precision_grads = True
    x = torch.randn(4, 3, 8, 8)
    for model in (warm, low, wide):  # the warm-up's call first: both compared calls take the fast paths
        with torch.autocast("cpu", dtype=torch.float16):
            model(x).float().square().sum().backward()
    cast = {id(m.weight) for m in low._cast_convs}
    assert cast
    for (name, p), q in zip(low.named_parameters(), wide.parameters()):
        assert p.grad.dtype == (torch.float16 if id(p) in cast else torch.float32), name
        assert q.grad.dtype == torch.float32 and torch.equal(p.grad.float(), q.grad), name
    warm(x).sum().backward()
    for model in (low, wide):
        model.zero_grad(set_to_none=True)
        model(x).square().sum().backward()  # no autocast: nothing cast
    assert all(p.grad.dtype == torch.float32 and torch.equal(p.grad, q.grad)
               for p, q in zip(low.parameters(), wide.parameters()))
    low.low_precision_grads = False
    low.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        low(x).float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in low.parameters())
    # gradients left in place across the switch are converted, not refused: fp16 ones widen exactly and the
    # next backward (no autocast) adds to them
    low.low_precision_grads = True
    low.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        low(x).float().sum().backward()
    kept = {id(p): p.grad.clone() for p in low.parameters()}
    assert any(g.dtype == torch.float16 for g in kept.values())
    low(x).sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in low.parameters())
    warm.zero_grad(set_to_none=True)
    warm.load_state_dict(low.state_dict())
    warm(x).sum().backward()
    for p, q in zip(low.parameters(), warm.parameters()):
        assert torch.equal(p.grad, kept[id(p)].float() + q.grad)


def test_state_dicts_interchange_and_eval():
    eager, fused = _pair()
    assert list(eager.state_dict()) == list(fused.state_dict())
    names = list(resnet("resnet18").state_dict())
    assert names[:2] == ["conv1.weight", "bn1.weight"] and "layer2.0.downsample.1.running_var" in names
    assert "fc.weight" in names and len([n for n in names if n.endswith("num_batches_tracked")]) == 20
    assert sum(p.numel() for p in resnet("resnet18").parameters()) == 11_173_962
    assert sum(p.numel() for p in resnet("resnet34").parameters()) == 21_282_122
    x = torch.randn(3, 3, 8, 8, device=DEVICE)
    eager.train()(x)  # move the running statistics away from their initial values
    fused.load_state_dict(eager.state_dict())
    eager.eval()
    fused.eval()
    with torch.no_grad():
        assert_close(fused(x), eager(x).double(), torch.float32)
        assert_close(fold_batch_norms(eager)(x), eager(x).double(), torch.float32)
        assert_close(fold_batch_norms(fused)(x), eager(x).double(), torch.float32)


def test_no_batch_norm_and_backends():
    m = ResNet((1, 1, 1, 1), widths=TINY, no_batch_norm=True)
    assert not any("bn" in k or "downsample.1" in k for k in m.state_dict())
    assert m.conv1.bias is not None
    fused = ResNet((1, 1, 1, 1), widths=TINY, no_batch_norm=True, backend="triton")
    fused.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 8, 8)
    assert_close(fused(x), m(x).double(), torch.float32)
    assert compile_model(m) is m
    with pytest.raises(ValueError, match="backend must be one of"):
        m.set_backend("cuda")
    with pytest.raises(ValueError, match="name must be one of"):
        resnet("resnet50")


# ---------------------------------------------------------------------------------------------- data
def _images(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n)


def _write(fmt, root: Path, per_batch=4, n_test=6):
    """A tiny CIFAR-10 in ``fmt``; returns (train images, train labels, test images, test labels)."""
    root.mkdir(parents=True, exist_ok=True)
    parts = [_images(per_batch, i) for i in range(5)]
    test = _images(n_test, 9)
    if fmt == "webp":
        tr = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        for i in range(5):
            cifar10.write_shard(root / f"train_{i}.webp", parts[i][0].transpose(0, 2, 3, 1), per_batch)
        cifar10.write_shard(root / "test.webp", test[0].transpose(0, 2, 3, 1), n_test)
        np.savez(root / "labels.npz", train_labels=tr[1].astype(np.uint8), test_labels=test[1].astype(np.uint8))
        return (*tr, *test)
    write = cifar10.write_python_batch if fmt == "python" else cifar10.write_binary_batch
    suffix = "" if fmt == "python" else ".bin"
    for i, (im, lab) in enumerate(parts):
        write(root / f"data_batch_{i + 1}{suffix}", im, lab)
    write(root / f"test_batch{suffix}", *test)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), *test


def _rows_as_set(images, labels):
    return sorted((int(lab), im.tobytes()) for im, lab in zip(images, labels))


@pytest.mark.parametrize("fmt", ["python", "binary", "webp"])
def test_load_tiny_files(fmt, tmp_path):
    tr_x, tr_y, te_x, te_y = _write(fmt, tmp_path / fmt)
    data = resnet_data.load(str(tmp_path / fmt))
    assert data.name == "cifar10" and data.train_images.shape == (20, 3, 32, 32) and data.test_images.shape[0] == 6
    assert _rows_as_set(data.train_images, data.train_labels) == _rows_as_set(tr_x, tr_y)  # same rows, shuffled
    assert _rows_as_set(data.test_images, data.test_labels) == _rows_as_set(te_x, te_y)
    assert len(resnet_data.load(str(tmp_path / fmt), train_limit=7).train_images) == 7
    syn = resnet_data.load(synthetic=True, train_limit=10, test_limit=4)
    assert syn.name == "synthetic" and syn.train_images.shape == (10, 3, 32, 32)


def test_plan_and_shards():
    a, b = resnet_data.epoch_plan(50, 3, 1), resnet_data.epoch_plan(50, 3, 1)
    assert torch.equal(a.perm, b.perm) and torch.equal(a.crops, b.crops) and torch.equal(a.flips, b.flips)
    assert not torch.equal(a.perm, resnet_data.epoch_plan(50, 3, 2).perm)
    assert a.crops.min() >= 0 and a.crops.max() <= 8 and sorted(a.perm.tolist()) == list(range(50))
    whole = resnet_data.batch_rows(a, 2, 8, 0, 1)
    assert torch.equal(torch.cat([resnet_data.batch_rows(a, 2, 8, r, 2) for r in range(2)]), whole)
    with pytest.raises(ValueError, match="not a multiple"):
        resnet_data.PlannedBatchSampler(50, 9, 0, world=2)


@pytest.mark.parametrize("workers", [0, 2])
def test_gpu_resident_batches_equal_dataloader_batches(workers):
    """Both data paths give the same augmented batches (the plan's crops and flips), equal to a plain
    numpy pad / crop / flip; a sampler set to a later step resumes there."""
    images, labels = _images(40, 1)
    gpu = resnet_data.GpuLoader(images, labels, 8, seed=5, device=DEVICE, channels_last=False)
    sampler = resnet_data.PlannedBatchSampler(40, 8, seed=5)
    loader = resnet_data.make_cpu_loader(images, labels, sampler, workers, pin_memory=False)
    sampler.set_epoch(2, start_step=1)
    cpu_batches = list(loader)
    assert len(cpu_batches) == 4
    plan = resnet_data.epoch_plan(40, 5, 2)
    mean, std = np.array(resnet_data.MEAN).reshape(3, 1, 1), np.array(resnet_data.STD).reshape(3, 1, 1)
    for step, (x_cpu, y_cpu) in enumerate(cpu_batches, start=1):
        x_gpu, y_gpu = gpu.batch(2, step)
        assert torch.equal(y_gpu.cpu(), y_cpu)
        assert_close(x_gpu.cpu(), x_cpu.double(), torch.float32)
        rows = resnet_data.batch_rows(plan, step, 8, 0, 1)
        for j, row in enumerate(rows.tolist()):
            img = np.pad(images[row], ((0, 0), (4, 4), (4, 4)))
            (y0, x0), flip = plan.crops[row].tolist(), bool(plan.flips[row])
            img = img[:, y0:y0 + 32, x0:x0 + 32][:, :, ::-1 if flip else 1]
            assert np.allclose(x_cpu[j].numpy(), (img / 255.0 - mean) / std, atol=1e-5)


# ---------------------------------------------------------------------------------------------- bench.resnet
def _train_args(out, *extra):
    return ["--synthetic", "--train-limit", "64", "--test-limit", "32", "--batch-size", "16", "--epochs", "2",
            "--out-dir", str(out), "--lr", "0.05", "--warmup", "3", *TINY_ARGS, *extra]


def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    """Run A trains 2 epochs of 4 steps. Run B, the same, is SIGKILLed after step 7 (mid-epoch 2, its last
    checkpoint at step 6); run C resumes B's folder. C ends with A's weights, buffers and metrics."""
    common = ["--save-every", "2", "--optimizer", "sgd-nesterov", "--label-smoothing", "0.1"]
    assert bench.resnet.main(_train_args(tmp_path / "a", *common)) == 0
    killed = subprocess.run([sys.executable, "-m", "bench.resnet", *_train_args(tmp_path / "b", *common),
                             "--debug-kill-at-step", "7"], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "b" / "final.pt").exists()
    state = torch.load(tmp_path / "b" / "last.pt", weights_only=False)
    assert (state["progress"]["epoch"], state["progress"]["step"], state["progress"]["global_step"]) == (1, 2, 6)
    assert bench.resnet.main(_train_args(tmp_path / "b", *common, "--resume", "auto")) == 0
    a, c = (torch.load(tmp_path / d / "final.pt") for d in ("a", "b"))
    assert list(a) == list(c) and all(torch.equal(a[k], c[k]) for k in a)
    ha, hc = (json.loads((tmp_path / d / "history.json").read_text()) for d in ("a", "b"))
    for ea, ec in zip(ha, hc, strict=True):
        assert len(ea["step_losses"]) == ea["steps"]
        for k in ("train_loss", "train_acc", "test_loss", "test_acc", "step_losses"):
            assert ea[k] == ec[k], (k, ea, ec)
    best = torch.load(tmp_path / "a" / "best.pt", weights_only=False)
    assert set(best) >= {"model", "optimizer", "scheduler", "scaler", "rng", "progress"}
    with pytest.raises(SystemExit, match="other settings"):
        bench.resnet.main(_train_args(tmp_path / "b", *common, "--resume", "auto", "--seed", "1"))


def test_ddp_gloo_two_processes_equal_one(tmp_path):
    """torchrun, 2 gloo processes x 4 images = one process x 8 images (no batch norm: its statistics
    are per process), same weights after 3 steps."""
    args = ["--synthetic", "--train-limit", "24", "--test-limit", "8", "--batch-size", "8", "--epochs", "1",
            "--no-batch-norm", "--data-path", "gpu", "--lr", "0.05", *TINY_ARGS]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                          "-m", "bench.resnet", *args, "--out-dir",
                          str(tmp_path / "ddp")], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert bench.resnet.main(args + ["--out-dir", str(tmp_path / "one")]) == 0
    ddp, one = (torch.load(tmp_path / d / "final.pt") for d in ("ddp", "one"))
    for k in one:
        assert rel_err(ddp[k], one[k]) <= 1e-5, k
    rows = json.loads(next((tmp_path / "ddp").glob("resnet-*.json")).read_text())
    assert json.loads(rows[0]["params"])["processes"] == 2


def test_ddp_scaling_curves_equal_one_process(tmp_path):
    """--scaling under torchrun (2 gloo processes x 4 images) and in one process (1 x 8 images): the report
    pairs them by global batch; without batch norm the two loss curves agree to rounding."""
    args = ["--synthetic", "--train-limit", "32", "--test-limit", "8", "--no-batch-norm", "--lr", "0.05",
            "--bench-steps", "2", "--warmup-iters", "2", "--machine", "cpu-x2", "--out-dir", str(tmp_path), *TINY_ARGS]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                          "-m", "bench.resnet", *args, "--scaling", "4"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert bench.resnet.main(args + ["--scaling", "8"]) == 0
    assert bench.resnet.main(["--scaling-report", str(tmp_path), "--out-dir", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "resnet_ddp-scaling-report.json").read_text())
    diff = [r for r in report if r["metric"] == "loss_max_rel_diff_vs_1gpu"]
    assert len(diff) == 1 and diff[0]["value"] <= 1e-5
    assert json.loads(diff[0]["params"])["machine"] == "cpu-x2"


def test_bench_steps_rows_and_curves(tmp_path):
    assert bench.resnet.main(["--synthetic", "--train-limit", "64", "--batch-size", "16", "--bench-steps",
                              "2", "--bench-rounds", "2", "--warmup-iters", "1", "--backend", "eager", "--out-dir",
                              str(tmp_path), *TINY_ARGS]) == 0
    rows = json.loads(next(tmp_path.glob("resnet-steps-*.json")).read_text())
    step = [r for r in rows if r["metric"] == "step_ms"]
    assert len(step) == 1 and step[0]["case"] == "resnet18_train_step" and step[0]["backend"] == "eager"
    assert json.loads(step[0]["params"])["batch"] == 16 and json.loads(step[0]["params"])["data"] == "synthetic"
    curves = json.loads(next(tmp_path.glob("*curves.json")).read_text())
    assert len(curves["losses"]["eager"]) == 5


def test_bench_steps_with_autograd_threads_off(tmp_path):
    """--autograd-threads off: the backward on the calling thread gives the same losses (bit-equal on the CPU;
    on a GPU within what run-to-run algorithm choices move them), and the rows say so (the default's rows keep
    their params)."""
    curves = {}
    for threads in ("on", "off"):
        out = tmp_path / threads
        assert bench.resnet.main(["--synthetic", "--train-limit", "32", "--batch-size", "16", "--bench-steps", "1",
                                  "--bench-rounds", "1", "--warmup-iters", "1", "--backend", "eager", "--out-dir",
                                  str(out), "--autograd-threads", threads, *TINY_ARGS]) == 0
        rows = json.loads(next(out.glob("resnet-steps-*.json")).read_text())
        params = json.loads([r for r in rows if r["metric"] == "step_ms"][0]["params"])
        assert params.get("autograd_threads") == (None if threads == "on" else "off")
        curves[threads] = json.loads(next(out.glob("*curves.json")).read_text())["losses"]["eager"]
    if torch.cuda.is_available():  # cuDNN's benchmarked algorithms and atomics differ from run to run
        assert curves["on"] == pytest.approx(curves["off"], rel=1e-3)
    else:
        assert curves["on"] == curves["off"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="sched_setaffinity is Linux's")
def test_bench_steps_on_one_host_core(tmp_path, monkeypatch):
    """--host-cores one times the steps with every thread on one core (the rows say so, the process's cores
    are its own again afterwards); without --bench-steps, or under torchrun, it is refused by name."""
    before = os.sched_getaffinity(0)
    assert bench.resnet.main(["--synthetic", "--train-limit", "32", "--batch-size", "16", "--bench-steps", "1",
                              "--bench-rounds", "1", "--warmup-iters", "1", "--backend", "eager", "--out-dir",
                              str(tmp_path), "--host-cores", "one", *TINY_ARGS]) == 0
    assert os.sched_getaffinity(0) == before
    rows = json.loads(next(tmp_path.glob("resnet-steps-*.json")).read_text())
    assert json.loads([r for r in rows if r["metric"] == "step_ms"][0]["params"])["host_cores"] == "one"
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--synthetic", "--host-cores", "one"])
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun every rank would pin to the same core
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--synthetic", "--bench-steps", "1", "--host-cores", "one"])


def test_sweep_profiler_and_scaling_modes(tmp_path):
    base = ["--synthetic", "--train-limit", "80", "--test-limit", "16", "--batch-size", "16", *TINY_ARGS]
    assert bench.resnet.main(base + ["--sweep-workers", "0,1", "--sweep-steps", "2", "--out-dir", str(tmp_path)]) == 0
    rows = json.loads(next(tmp_path.glob("resnet-workers-*.json")).read_text())
    assert {json.loads(r["params"])["workers"] for r in rows if r["metric"] == "images_per_s"} == {0, 1}
    assert [r for r in rows if r["metric"] == "best_workers"][0]["value"] in (0, 1)
    trace = tmp_path / "t.json"
    assert bench.resnet.main(base + ["--run-profiler", "--warmup-iters", "1", "--profile-steps", "1",
                                     "--trace-file-name", str(trace), "--out-dir", str(tmp_path / "p")]) == 0
    assert "traceEvents" in json.loads(trace.read_text())
    assert bench.resnet.main(base + ["--profile-one-step", "--warmup-iters", "1", "--out-dir",
                                     str(tmp_path / "p1")]) == 0
    assert not (tmp_path / "p1" / "final.pt").exists()
    assert bench.resnet.main(base + ["--scaling", "8,16", "--bench-steps", "1", "--warmup-iters", "1",
                                     "--out-dir", str(tmp_path / "s")]) == 0
    rows = json.loads(next((tmp_path / "s").glob("resnet_ddp-scaling-*proc.json")).read_text())
    assert {json.loads(r["params"])["batch_per_gpu"] for r in rows if r["metric"] == "images_per_s"} == {8, 16}
    curves = json.loads(next((tmp_path / "s").glob("resnet_ddp-*-curves.json")).read_text())
    assert sorted(curves["losses"]) == ["1x16", "1x8"] and len(curves["losses"]["1x8"]) == 2
    # a rerun of one size (a run cut short, then finished) keeps the other size's rows and curve
    assert bench.resnet.main(base + ["--scaling", "8", "--bench-steps", "2", "--warmup-iters", "1",
                                     "--out-dir", str(tmp_path / "s")]) == 0
    curves = json.loads(next((tmp_path / "s").glob("resnet_ddp-*-curves.json")).read_text())
    assert sorted(curves["losses"]) == ["1x16", "1x8"] and len(curves["losses"]["1x8"]) == 3
    rows = json.loads(next((tmp_path / "s").glob("resnet_ddp-scaling-*proc.json")).read_text())
    assert {json.loads(r["params"])["batch_per_gpu"] for r in rows if r["metric"] == "images_per_s"} == {8, 16}


def test_scaling_report(tmp_path):
    from bench import results

    rows = [results.make_row("resnet_ddp", "resnet18_ddp",
                             {"gpus": g, "processes": g, "batch_per_gpu": b, "data": "cifar10", "machine": "kind-x2"},
                             "bf16", "eager", "images_per_s", v, "inputs/s", device="Test GPU")
            for g, b, v in ((1, 512, 1000.0), (1, 1024, 1100.0), (2, 512, 1800.0))]
    # another DDP bucket size: its own efficiencies, against the same one-process rows
    rows.append(results.make_row("resnet_ddp", "resnet18_ddp", {"gpus": 2, "processes": 2, "batch_per_gpu": 512,
                                 "data": "cifar10", "machine": "kind-x2", "ddp_bucket_mb": 100}, "bf16", "eager",
                                 "images_per_s", 1900.0, "inputs/s", device="Test GPU"))
    results.write_rows(rows, tmp_path, "resnet_ddp", tag="x")
    for world, losses in ((1, {"1x512": [2.0, 1.0], "1x1024": [2.0, 1.5, 1.2]}), (2, {"2x512": [2.2, 1.5, 9.0]})):
        (tmp_path / f"resnet_ddp-scaling-{world}proc-curves.json").write_text(json.dumps(
            {"backend": "eager", "data": "cifar10", "dtype": "bf16", "machine": "kind-x2", "losses": losses}))
    assert bench.resnet.main(["--scaling-report", str(tmp_path), "--out-dir", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "resnet_ddp-scaling-report.json").read_text())
    bucket = {r["metric"]: r["value"] for r in report if json.loads(r["params"]).get("ddp_bucket_mb") == 100}
    assert bucket["weak_scaling_efficiency"] == pytest.approx(0.95)
    assert bucket["strong_scaling_efficiency"] == pytest.approx(1900 / 2200)
    report = [r for r in report if "ddp_bucket_mb" not in json.loads(r["params"])]
    out = {r["metric"]: r["value"] for r in report}
    assert out["weak_scaling_efficiency"] == pytest.approx(0.9)
    assert out["strong_scaling_efficiency"] == pytest.approx(1800 / 2200)
    assert out["loss_max_rel_diff_vs_1gpu"] == pytest.approx(6.5)  # step 3 (9.0 vs 1.2)
    assert out["loss_tail_rel_diff_vs_1gpu"] == pytest.approx(6.5)  # the last fifth: step 3
    assert all(json.loads(r["params"])["machine"] == "kind-x2" for r in report)
    assert {r["device"] for r in report} == {"Test GPU"}  # the measured rows' device, not this machine's
    assert (tmp_path / "out" / "resnet_ddp_scaling.png").stat().st_size > 0


def test_sgd_implementations():
    """--sgd auto: the triton backends step with triton_kernels.sgd.SGD, the others with torch.optim.SGD as torch
    runs it by default; --sgd fused gives those torch's fused step; the choice is forced with --sgd and means nothing
    for the other optimizers."""
    from triton_kernels import sgd

    params = [torch.nn.Parameter(torch.randn(3))]
    auto = bench.resnet.parse_args(["--optimizer", "sgd-nesterov"])
    assert bench.resnet.sgd_impl(auto, "triton+stepgraph") == "triton" and bench.resnet.sgd_impl(auto, "compile") == "torch"
    opt = bench.resnet.build_optimizer(auto, params, "triton")
    assert type(opt) is sgd.SGD and opt.defaults["nesterov"] and opt.defaults["weight_decay"] == 5e-4
    assert type(bench.resnet.build_optimizer(auto, params, "eager")) is torch.optim.SGD
    forced = bench.resnet.parse_args(["--sgd", "torch-fused"])
    assert bench.resnet.build_optimizer(forced, params, "triton").defaults["fused"] is True
    fused = bench.resnet.parse_args(["--sgd", "fused"])  # each backend's one-launch step
    assert type(bench.resnet.build_optimizer(fused, params, "triton+graph")) is sgd.SGD
    assert bench.resnet.build_optimizer(fused, params, "compile").defaults["fused"] is True
    assert bench.resnet.sgd_impl(bench.resnet.parse_args(["--optimizer", "adam"]), "triton") is None
    # the Triton SGD reads bf16 weight gradients; torch's optimizers and fp16's GradScaler take fp32 ones
    for argv, backend, low in ((["--sgd", "fused", "--amp", "bf16"], "triton", True),
                               (["--sgd", "torch", "--amp", "bf16"], "triton", False),
                               (["--sgd", "fused", "--amp", "fp16"], "triton", False),
                               (["--sgd", "fused", "--amp", "bf16"], "eager", False),
                               (["--sgd", "fused", "--amp", "bf16"], "triton+compile", False)):
        model = ResNet((1, 1, 1, 1), widths=TINY, backend=backend)
        bench.resnet.Trainer(bench.resnet.parse_args(argv), model, model, torch.device("cpu"), 10)
        assert model.low_precision_grads is low, (argv, backend)


def test_bad_arguments():
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--backend", "cuda"])
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--backend", "eager,triton"])  # several backends are for --bench-steps
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--backend", "eager,triton,eager", "--bench-steps", "2"])  # one backend, one row set
    with pytest.raises(SystemExit):
        bench.resnet.parse_args(["--widths", "4,8"])
    with pytest.raises(SystemExit):  # its graphs would nest in the step's graph
        bench.resnet.parse_args(["--backend", "compile+stepgraph", "--compile-mode", "reduce-overhead"])
    if not torch.cuda.is_available():
        for backend in ("triton+graph", "triton+stepgraph"):
            with pytest.raises(SystemExit, match="CUDA graphs need a CUDA device"):
                bench.resnet.build_model(bench.resnet.parse_args(["--backend", backend]), backend, torch.device("cpu"))
    a = bench.resnet.parse_args(["--optimizer", "adadelta", "--amp"])
    assert a.lr == 1.0 and a.amp == "bf16"
    f = bench.resnet.warmup_cosine(10, 2)
    assert [round(f(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_resnet18_triton_matches_eager_bf16():
    """One bf16-autocast training step of ResNet-18, ours and eager from the same weights, each against an
    fp32 eager step (tf32 off): our loss, gradients and running statistics may be no further from fp32 than
    eager bf16's are (2x, with a floor). Two bf16 runs compared with each other differ by both errors, and
    a deep net's first-layer gradient in bf16 differs from fp32 by tens of percent."""
    torch.manual_seed(0)
    eager = resnet("resnet18").cuda().to(memory_format=torch.channels_last)
    exact = resnet("resnet18").cuda().to(memory_format=torch.channels_last)
    fused = resnet("resnet18", backend="triton").cuda().to(memory_format=torch.channels_last)
    exact.load_state_dict(eager.state_dict())
    fused.load_state_dict(eager.state_dict())
    x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    Fp32StepBounds(exact, eager, x, torch.randint(0, 10, (64,), device="cuda")).check(fused)
    for (name, b32), be, bf in zip(exact.named_buffers(), eager.buffers(), fused.buffers()):
        if b32.is_floating_point():
            assert rel_err(bf, b32) <= max(2 * rel_err(be, b32), 1e-2), name


@pytest.mark.gpu
def test_gpu_one_launch_prologue_equals_per_layer_casts_bf16():
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        assert _prologue_pair("cuda", torch.bfloat16)
    finally:
        torch.backends.cudnn.deterministic = deterministic


@pytest.mark.gpu
def test_gpu_triton_model_compiles_fullgraph():
    """The triton model under torch.compile(fullgraph=True), one bf16-autocast training step: no graph break,
    and its loss and every gradient no further from an fp32 eager step's than the uncompiled triton model's
    (2x, with a floor)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    exact = resnet("resnet18", backend="eager").cuda().to(memory_format=torch.channels_last)
    models = [resnet("resnet18", backend=b).cuda().to(memory_format=torch.channels_last)
              for b in ("triton", "triton+compile")]
    for m in models:
        m.load_state_dict(exact.state_dict())
    x = torch.randn(32, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (32,), device="cuda")
    assert torch._dynamo.explain(models[1])(x).graph_break_count == 0
    models[1].zero_grad(set_to_none=True)
    Fp32StepBounds(exact, models[0], x, labels).check(models[1], torch.compile(models[1], fullgraph=True))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["eager", "triton", "compile"])
def test_gpu_step_graph_equals_eager_calls(backend):
    """"+stepgraph" (eager steps, then one captured step, then replays) trains as the same backend's eager calls:
    same losses and weights over the warm-up, the capture's step and the replays (fp32, cuDNN deterministic), with
    the memory freed by others after the capture (cuBLAS's workspaces, the allocator's cache) reused meanwhile."""
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        runs = []
        for name in (backend, backend + "+stepgraph"):
            args = bench.resnet.parse_args(["--widths", "8,16,16,32", "--backend", name, "--lr", "0.05"])
            torch.manual_seed(0)
            model, forward = bench.resnet.build_model(args, name, torch.device("cuda"))
            trainer = bench.resnet.Trainer(args, model, forward, torch.device("cuda"), 100)
            g = torch.Generator(device="cuda").manual_seed(1)
            losses, poison = [], None
            for i in range(bench.resnet.STEP_GRAPH_WARMUP + 4):
                if i == bench.resnet.STEP_GRAPH_WARMUP + 1:  # after the capture: what torch.compile's graphs do
                    graphs.drop_cublas_workspaces()  # (a replay must not write to memory it does not own)
                    torch.cuda.empty_cache()
                    poison = torch.full((1 << 26,), 7, dtype=torch.uint8, device="cuda")
                x = torch.randn(16, 3, 32, 32, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
                losses.append(trainer.step(x, torch.randint(0, 10, (16,), device="cuda", generator=g))[0])
            assert bool((poison == 7).all())
            runs.append((torch.stack(losses), [p.detach().clone() for p in model.parameters()]))
        (eager_losses, eager_weights), (graph_losses, graph_weights) = runs
        torch.testing.assert_close(graph_losses, eager_losses, rtol=1e-5, atol=1e-6)
        for a, b in zip(graph_weights, eager_weights):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    finally:
        torch.backends.cudnn.deterministic = deterministic


DDP_RANKS_AGREE = """
import sys, torch, torch.distributed
import bench.resnet as br


def train_and_compare(dist):  # the DDP model, which holds the process group, is freed on return
    args = br.parse_args(["--widths", "8,16,16,32", "--backend", sys.argv[1], "--amp", sys.argv[2], "--lr", "0.05"])
    steps = br.STEP_GRAPH_WARMUP + 3 if sys.argv[1].endswith("+stepgraph") else 4  # replays too
    torch.manual_seed(0)
    model, forward = br.build_model(args, args.backends[0], dist.device, dist)
    start = [p.detach().clone() for p in model.parameters()]
    trainer = br.Trainer(args, model, forward, dist.device, 100)
    g = torch.Generator(device=dist.device).manual_seed(1 + dist.rank)  # each rank its own images
    for _ in range(steps):
        x = torch.randn(16, 3, 32, 32, device=dist.device, generator=g)
        x = x.contiguous(memory_format=torch.channels_last) if args.channels_last else x
        trainer.step(x, torch.randint(0, 10, (16,), device=dist.device, generator=g))
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(dist.world)]
    torch.distributed.all_gather(every, flat)
    assert all(torch.equal(every[0], f) for f in every), "ranks' weights differ: gradients not all-reduced"
    assert all(not torch.equal(a, p) for a, p in zip(start, model.parameters())), "a weight did not move"


# as bench.resnet.main does: nothing that holds the process group outlives its teardown (a gloo group
# destroyed during the interpreter's exit can abort the process)
dist = br.Dist()
train_and_compare(dist)
dist.close()
br.exit_process(0)
"""


def _ranks_agree(tmp_path, backend: str, amp: str) -> None:
    """Two processes train 4 steps on different images (DDP_RANKS_AGREE) and must end with bit-identical
    weights, which only all-reduced gradients give (each rank's own gradients would move its weights apart)."""
    script = tmp_path / "ranks_agree.py"
    script.write_text(DDP_RANKS_AGREE)
    env = dict(_env(), NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                          str(script), backend, amp], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]


def test_ddp_gloo_ranks_agree(tmp_path):
    _ranks_agree(tmp_path, "eager", "none")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP over NCCL needs two GPUs")
@pytest.mark.parametrize("backend", ["eager+graph", "triton+graph", "eager+stepgraph", "triton+stepgraph"])
def test_gpu_ddp_graphed_ranks_agree(tmp_path, backend):
    """The graphed backends under DDP (batch norm, bf16): "+graph" captures the module, then DDP wraps it;
    "+stepgraph" captures forward, loss, backward and DDP's all-reduces in one graph."""
    _ranks_agree(tmp_path, backend, "bf16")
