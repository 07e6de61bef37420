"""Fused softmax-regression SGD step vs a float64 reference (loss, correct count, dW, db, updated
weights), odd shapes, strided inputs, partial last batches, argument errors; the training ladder;
and the CI check: two epochs on a small real-format MNIST subset in the interpreter, loss falls."""
import pytest
import torch
from torch.nn import functional

from bench.data import mnist as mnist_data
from bench.mnist_ladder import GRAPH_VARIANTS, make_trainer
from models.softmax_regression import SoftmaxRegression
from triton_kernels import softmax_regression
from triton_kernels.testing import assert_close, poison_

from .conftest import DEVICE, GPU


def _data(N, K, C, device=DEVICE, u8=False):
    if u8:
        x = torch.randint(0, 256, (N, K), dtype=torch.uint8, device=device)
    else:
        x = torch.rand(N, K, device=device)
    y = torch.randint(0, C, (N,), device=device)
    w = torch.randn(C, K, device=device) * 0.1
    b = torch.randn(C, device=device) * 0.1
    return x, y, w, b


def _reference_step(x, y, w, b, idx, lr, u8=False):
    """float64: (loss sum, correct, dW, db, W', b') for rows idx."""
    xb = x[idx].double().cpu()
    if u8:
        xb = xb / 255.0
    yb = y[idx].cpu()
    w64 = w.detach().double().cpu().requires_grad_()
    b64 = b.detach().double().cpu().requires_grad_()
    z = xb @ w64.T + b64
    loss = functional.cross_entropy(z, yb, reduction="sum")
    (loss / len(idx)).backward()
    correct = int((z.argmax(1) == yb).sum())
    return loss.item(), correct, w64.grad, b64.grad, w64.detach() - lr * w64.grad, b64.detach() - lr * b64.grad


def _poison_stats(buf):
    """The running sums are the kernel's only outputs besides W and b (updated in place): start them at
    NaN / -1 and check they were overwritten by the expected values minus the poison."""
    poison_(buf.loss_sum)
    poison_(buf.correct_sum)


def _wb(w, b):
    return torch.cat([w.detach(), b.detach()[:, None]], 1).clone()


@pytest.mark.parametrize("N,K,C,B", [(1, 1, 1, 1), (3, 5, 2, 2), (17, 37, 10, 16), (70, 50, 10, 32),
                                     (100, 130, 16, 48), (40, 784, 10, 40), (1000, 3, 10, 1000)])
def test_step_matches_float64(N, K, C, B):
    x, y, w, b = _data(N, K, C)
    perm = torch.randperm(N, device=DEVICE)
    lr = 0.3
    trainer = softmax_regression.FusedSGDStep(w, b, x, y, B, lr, perm=perm)
    w0, b0 = w.clone(), b.clone()
    trainer.step()
    loss, correct, dw, db, w1, b1 = _reference_step(x, y, w0, b0, perm[:B], lr)
    assert_close(w, w1, torch.float32, name="W'")
    assert_close(b, b1, torch.float32, name="b'")
    # the update itself (W' - W = -lr dW), not only W' (which is dominated by W)
    assert_close((w0 - w).double().cpu() / lr, dw, torch.float32, name="dW", scale=10)
    assert_close((b0 - b).double().cpu() / lr, db, torch.float32, name="db", scale=10)
    loss_sum, n_correct = trainer.read_stats()
    assert abs(loss_sum - loss) <= 1e-5 * max(1.0, abs(loss))
    assert n_correct == correct
    assert trainer.read_stats() == (0.0, 0)


@pytest.mark.parametrize("u8", [False, True])
def test_epoch_with_partial_last_batch(u8):
    """Three steps of batch 32 over 70 rows (32, 32, 6): counter wraps, sums cover the epoch."""
    N, K, C, B, lr = 70, 33, 10, 32, 0.5
    x, y, w, b = _data(N, K, C, u8=u8)
    perm = torch.randperm(N, device=DEVICE)
    trainer = softmax_regression.FusedSGDStep(w, b, x, y, B, lr, perm=perm)
    w_ref, b_ref = w.clone(), b.clone()
    loss_ref, correct_ref = 0.0, 0
    for s in range(3):
        trainer.step()
        loss, correct, _, _, w_ref, b_ref = _reference_step(x, y, w_ref, b_ref, perm[s * B:(s + 1) * B], lr, u8=u8)
        loss_ref, correct_ref = loss_ref + loss, correct_ref + correct
        assert_close(w, w_ref, torch.float32, name=f"W after step {s}")
        assert_close(b, b_ref, torch.float32, name=f"b after step {s}")
    assert int(trainer.buf.step.item()) == 0  # wrapped to the start of the next epoch
    loss_sum, n_correct = trainer.read_stats()
    assert abs(loss_sum - loss_ref) <= 1e-5 * loss_ref and n_correct == correct_ref
    assert trainer.read_stats() == (0.0, 0)


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
@pytest.mark.parametrize("u8", [False, True])
def test_precisions_and_uint8_match_float64(precision, u8):
    """The tf32 / tf32x3 code paths (split operands; for uint8 x only the other operand is split) and uint8
    x (integers 0..255, the scale on the products, the constant feature 255): in the interpreter every
    product is exact fp32, so all of them must agree with float64 to fp32 tolerance."""
    N, K, C, B, lr = 50, 37, 10, 32, 0.3
    x, y, w, b = _data(N, K, C, u8=u8)
    perm = torch.randperm(N, device=DEVICE)
    w0, b0 = w.clone(), b.clone()
    t = softmax_regression.FusedSGDStep(w, b, x, y, B, lr, perm=perm, precision=precision)
    t.step()
    loss, correct, dw, db, w1, b1 = _reference_step(x, y, w0, b0, perm[:B], lr, u8=u8)
    tf32 = GPU and precision == "tf32"
    assert_close((w0 - w).double().cpu() / lr, dw, torch.float32, tf32=tf32, name="dW", scale=10)
    assert_close((b0 - b).double().cpu() / lr, db, torch.float32, tf32=tf32, name="db", scale=10)
    loss_sum, n_correct = t.read_stats()
    assert abs(loss_sum - loss) <= (1e-3 if tf32 else 1e-5) * loss and abs(n_correct - correct) <= (2 if tf32 else 0)


def test_persistent_launches_match_single_steps():
    """One launch of n steps == n launches of one step, bitwise, whatever the split (also across the
    epoch boundary), and the device state (step, phase, buffers) stays consistent between launches."""
    N, K, C, B, lr = 90, 40, 10, 16, 0.4   # 6 steps per epoch, the last one of 10 rows
    x, y, w, b = _data(N, K, C)
    perm = torch.randperm(N, device=DEVICE)
    w0, b0, w2, b2 = w.clone(), b.clone(), w.clone(), b.clone()
    one = softmax_regression.FusedSGDStep(w, b, x, y, B, lr, perm=perm)
    many = softmax_regression.FusedSGDStep(w2, b2, x, y, B, lr, perm=perm)
    _poison_stats(many.buf)
    many.reset_stats()
    splits = [1, 2, 4, 3, 6]  # 16 steps: 2 epochs + 4 steps
    for n in splits:
        many.steps(n)
        for _ in range(n):
            one.step()
        assert torch.equal(w2, w) and torch.equal(b2, b), f"after a launch of {n} steps"
        assert torch.equal(many.buf.state, one.buf.state)
        assert torch.equal(many.buf.zsnap, many.buf.zacc)  # the snapshot the next launch starts from
    total = sum(splits)
    assert many.buf.state.tolist() == [total % 6, 0]
    # every contribution was counted: 16 steps, one program here, every row of the 16-row tile (rows past
    # a short batch add 0 and their count), the C real classes only (the exchange is class-major)
    counts = (many.buf.zacc & 255).sum(dim=(0, 2))
    assert counts[:C].tolist() == [total * 16 * many.programs] * C and counts[C:].sum() == 0
    assert many.read_stats() == one.read_stats()
    # and the whole run agrees with float64 training on the same batches
    w_ref, b_ref = _reference_train(x, y, w0, b0, perm, B, lr, total)
    assert_close(w, w_ref, torch.float32, name="W after 16 steps", scale=3)
    assert_close(b, b_ref, torch.float32, name="b after 16 steps", scale=3)


def _reference_train(x, y, w, b, perm, B, lr, steps, u8=False):
    w64, b64 = w.detach().double().cpu(), b.detach().double().cpu()
    N = x.shape[0]
    n_steps = -(-N // B)
    for t in range(steps):
        s = t % n_steps
        _, _, _, _, w64, b64 = _reference_step(x, y, w64, b64, perm[s * B:(s + 1) * B], lr, u8=u8)
    return w64, b64


def test_epoch_launch_matches_float64():
    """Two epochs, each one persistent launch, vs float64 training on the same batches."""
    N, K, C, B, lr = 75, 30, 10, 16, 0.5
    x, y, w, b = _data(N, K, C)
    perm = torch.randperm(N, device=DEVICE)
    w0, b0 = w.clone(), b.clone()
    t = softmax_regression.FusedSGDStep(w, b, x, y, B, lr, perm=perm)
    t.epoch()
    t.epoch()
    w_ref, b_ref = _reference_train(x, y, w0, b0, perm, B, lr, 2 * t.n_steps)
    assert_close(w, w_ref, torch.float32, name="W after 2 epochs", scale=3)
    assert_close(b, b_ref, torch.float32, name="b after 2 epochs", scale=3)


def test_wait_timeout_sets_flag():
    """Programs that can never all be resident (here: two programs in the interpreter, which runs them
    one after the other) make the wait give up after max_spin polls; read_stats then raises."""
    if GPU:
        pytest.skip("on a GPU two programs are co-resident: the wait never times out")
    N, K, C, B = 8, 32, 3, 8
    x, y, w, b = _data(N, K, C)
    t = softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1)
    softmax_regression.launch(w, b, x, y, t.perm, t.buf, B, 0.1, t.config, block_k=16, max_spin=3)
    with pytest.raises(RuntimeError, match="timed out"):
        t.read_stats()


def test_strided_inputs():
    """x a column-strided view, y a strided view, weight a transposed view, perm int64: read in place."""
    N, K, C, B = 21, 19, 7, 16
    big = torch.rand(N, 2 * K, device=DEVICE)
    x = big[:, ::2]
    y = torch.randint(0, C, (3 * N,), device=DEVICE, dtype=torch.int32)[1::3]
    w = (torch.randn(K, C, device=DEVICE) * 0.1).t()
    b = torch.randn(C, device=DEVICE) * 0.1
    perm = torch.randperm(N, device=DEVICE)
    w0, b0 = w.clone(), b.clone()
    softmax_regression.FusedSGDStep(w, b, x, y, B, 0.2, perm=perm).step()
    _, _, _, _, w1, b1 = _reference_step(x, y.long(), w0, b0, perm[:B], 0.2)
    assert_close(w, w1, torch.float32, name="W'")
    assert_close(b, b1, torch.float32, name="b'")


def test_huge_logits_and_ties():
    """Logits of +-1e4 stay finite (max-subtracted softmax); equal logits count as argmax = first."""
    N, K, C = 4, 3, 5
    x = torch.ones(N, K, device=DEVICE)
    y = torch.tensor([0, 1, 2, 3], device=DEVICE)
    w = torch.zeros(C, K, device=DEVICE)
    b = torch.tensor([1e4, -1e4, 0.0, 1e4, 5.0], device=DEVICE)
    t = softmax_regression.FusedSGDStep(w, b, x, y, 4, 1e-3)
    t.step()
    loss, correct = t.read_stats()
    ref, ref_correct, *_ = _reference_step(x, y, torch.zeros(C, K), torch.tensor([1e4, -1e4, 0.0, 1e4, 5.0]),
                                           torch.arange(4), 1e-3)
    assert abs(loss - ref) <= 1e-5 * ref and correct == ref_correct == 1
    assert torch.isfinite(w).all() and torch.isfinite(b).all()


def labels_case(device: str) -> None:
    """A label outside [0, C) is refused: by the trainer before any launch (it checks its labels once),
    by the functional step before launch when the labels are on the CPU; a label changed after the
    trainer was built is flagged by the kernel and raised by read_stats (the trainer's one sync)."""
    N, K, C, B = 20, 9, 5, 8
    for bad in (C, -1):
        x, y, w, b = _data(N, K, C, device=device)
        y[7] = bad
        w0 = w.clone()
        with pytest.raises(ValueError, match=f"y holds label {bad} outside \\[0, {C}\\)"):
            softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1)
        if device == "cpu":
            with pytest.raises(ValueError, match="y holds label"):
                softmax_regression.sgd_step(w, b, x, y, torch.arange(N),
                                            softmax_regression.StepBuffers.allocate(B, device), B, 0.1)
        assert torch.equal(w, w0)
        y[7] = 0
        trainer = softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1)
        y[7] = bad
        trainer.epoch()
        with pytest.raises(ValueError, match="label outside"):
            trainer.read_stats()


def test_labels_out_of_range():
    labels_case(DEVICE)


def test_perm_out_of_range():
    """A row index outside [0, N) in perm is refused before any launch: by the trainer (it reads its perm
    once), by set_perm and the functional step when the perm is on the CPU."""
    N, K, C, B = 20, 9, 5, 8
    x, y, w, b = _data(N, K, C)
    w0 = w.clone()
    for bad in (N, -1, 10**6):
        perm = torch.arange(N, device=DEVICE)
        perm[3] = bad
        with pytest.raises(ValueError, match=f"perm holds row index {bad} outside \\[0, {N}\\)"):
            softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1, perm=perm)
        if DEVICE == "cpu":
            with pytest.raises(ValueError, match="perm holds row index"):
                softmax_regression.sgd_step(w, b, x, y, perm, softmax_regression.StepBuffers.allocate(B, DEVICE),
                                            B, 0.1)
            with pytest.raises(ValueError, match="perm holds row index"):
                softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1).set_perm(perm)
    assert torch.equal(w, w0)


@pytest.mark.gpu
def test_gpu_labels_out_of_range():
    labels_case("cuda")


def fixed_point_case(device: str) -> None:
    """Logits past the exchange's fixed-point range (|z| < 2**23; each of the S programs' partials below
    2**23 / S) are flagged and raised by read_stats; NaN weights too; logits within it train correctly."""
    N, K, C, B = 24, 40, 6, 12
    x, y, w, b = _data(N, K, C, device=device)
    perm = torch.randperm(N, device=device)
    trainer = softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1, perm=perm)
    limit = 2.0 ** 23 / trainer.programs
    b[2] = 0.4 * limit  # within: no flag, the float64 update
    w0, b0 = w.clone(), b.clone()
    trainer.step()
    trainer.read_stats()
    _, _, _, _, w1, b1 = _reference_step(x, y, w0, b0, perm[:B], 0.1)
    assert_close(w, w1, torch.float32, name="W' at large logits")
    for value, what in ((1.2 * 2.0 ** 23, "bias"), (float("nan"), "weight")):
        x, y, w, b = _data(N, K, C, device=device)
        (b if what == "bias" else w)[1] = value
        trainer = softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1)
        trainer.step()
        with pytest.raises(RuntimeError, match="2\\*\\*23"):
            trainer.read_stats()


def test_fixed_point_limit_flagged():
    fixed_point_case(DEVICE)


@pytest.mark.gpu
def test_gpu_fixed_point_limit_flagged():
    fixed_point_case("cuda")


def test_torch_op():
    N, K, C, B = 30, 20, 10, 16
    x, y, w, b = _data(N, K, C)
    perm = torch.randperm(N, device=DEVICE)
    buf = softmax_regression.StepBuffers.allocate(B, DEVICE)
    w0, b0 = w.clone(), b.clone()
    softmax_regression.sgd_step(w, b, x, y, perm, buf, B, 0.1)
    _, _, _, _, w1, b1 = _reference_step(x, y, w0, b0, perm[:B], 0.1)
    assert_close(w, w1, torch.float32, name="W'")
    assert_close(b, b1, torch.float32, name="b'")
    assert int(buf.step.item()) == 1
    with pytest.raises(ValueError, match="buf"):
        softmax_regression.sgd_step(w, b, x, y, perm, buf, 64, 0.1)


def test_errors_name_the_argument():
    N, K, C = 8, 6, 3
    x, y, w, b = _data(N, K, C)
    ok = dict(weight=w, bias=b, x=x, y=y, batch_size=4, lr=0.1)
    cases = [
        (dict(weight=w.double()), "weight"), (dict(weight=torch.randn(17, K)), "weight"),
        (dict(bias=torch.randn(C + 1)), "bias"), (dict(x=x[:, :5]), "x has 5 features"),
        (dict(x=x.half()), "x has dtype"), (dict(y=y[:5]), "y has 5 labels"), (dict(y=y.float()), "y has dtype"),
        (dict(batch_size=0), "batch_size"), (dict(batch_size=softmax_regression.MAX_BATCH + 1), "batch_size"),
        (dict(lr=-1.0), "lr"), (dict(x=x.reshape(-1)), "x must have 2 dims"),
    ]
    for change, msg in cases:
        with pytest.raises(ValueError, match=msg):
            softmax_regression.FusedSGDStep(**{**ok, **change})
    with pytest.raises(ValueError, match="perm"):
        softmax_regression.FusedSGDStep(**ok, perm=torch.arange(N - 1))
    with pytest.raises(ValueError, match="precision"):
        softmax_regression.FusedSGDStep(**ok, precision="fp8")
    t = softmax_regression.FusedSGDStep(**ok)
    with pytest.raises(ValueError, match="perm"):
        t.set_perm(torch.arange(N + 1))
    with pytest.raises(ValueError, match="n must be"):
        t.steps(0)


def test_ladder_variants_agree():
    """eager-dataloader, eager-preloaded and triton train identically (same batches, same init)."""
    N, B = 150, 64
    x = torch.rand(N, 784)
    y = torch.randint(0, 10, (N,))
    init = SoftmaxRegression().state_dict()
    perm = torch.randperm(N)
    finals, stats = [], []
    for v in ("eager-dataloader", "eager-preloaded", "triton", "triton+persistent"):
        m = SoftmaxRegression()
        m.load_state_dict(init)
        t = make_trainer(v, m, x, y, B, 0.2, device=DEVICE)
        t.prepare()
        t.train_epoch(perm)
        stats.append(t.read_stats())
        finals.append(torch.cat([m.weight.detach(), m.bias.detach()[:, None]], 1).cpu())
    for f, s in zip(finals[1:], stats[1:]):
        assert_close(f, finals[0], torch.float32, name="final weights")
        assert abs(s[0] - stats[0][0]) < 1e-5 and s[1] == stats[0][1]
    assert torch.equal(finals[2], finals[3]) and stats[2] == stats[3]  # step-wise == persistent, bitwise
    with pytest.raises(ValueError, match="variant"):
        make_trainer("fastest", SoftmaxRegression(), x, y, B, 0.1)
    if not GPU:
        for v in GRAPH_VARIANTS:
            with pytest.raises(RuntimeError, match="CUDA"):
                make_trainer(v, SoftmaxRegression(), x, y, B, 0.1)


def test_ladder_lives_in_the_study():
    """models/ holds the model only; the ladder's trainers are the MNIST study's (bench/mnist_ladder.py)."""
    import models.softmax_regression as model_module

    public = {n for n, v in vars(model_module).items() if not n.startswith("_") and getattr(v, "__module__", "")
              == model_module.__name__}
    assert public == {"SoftmaxRegression"}
    trainer = make_trainer("eager-preloaded", SoftmaxRegression(), torch.rand(8, 784), torch.randint(0, 10, (8,)), 4,
                           0.1, device=DEVICE)
    assert type(trainer).__module__ == "bench.mnist_ladder"


def test_two_epochs_real_subset_loss_falls(tmp_path):
    """CI: two epochs of the fused Triton step on a small real-format MNIST subset; the loss falls."""
    try:
        mnist_data.write_subset(tmp_path, 384, 256)
    except mnist_data.MnistFormatError:
        pytest.skip("real MNIST files not available")
    train, test = mnist_data.load(tmp_path)
    torch.manual_seed(0)
    m = SoftmaxRegression()
    acc0 = m.accuracy(test.images, test.labels)
    t = make_trainer("triton", m, train.images, train.labels, 128, 0.1, device=DEVICE)
    losses = []
    for e in range(2):
        t.train_epoch(torch.randperm(len(train), generator=torch.Generator().manual_seed(e)))
        losses.append(t.read_stats()[0])
    assert losses[1] < losses[0] < 2.5, losses
    assert m.accuracy(test.images, test.labels) > max(acc0, 0.5)


def test_bench_quick_runs(tmp_path):
    from bench import mnist as bench_mnist

    try:
        mnist_data.write_subset(tmp_path / "data", 256, 128)
    except mnist_data.MnistFormatError:
        pytest.skip("real MNIST files not available")
    rc = bench_mnist.main(["--quick", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                           "--variants", "eager-preloaded,triton,triton+epoch-graph", "--epochs", "1"])
    assert rc == 0
    import pandas as pd

    df = pd.read_csv(tmp_path / "out" / "mnist.csv")
    assert set(df.backend) == {"eager-preloaded", "triton", "triton+epoch-graph"}
    acc = df[df.metric == "test_acc"].set_index("backend").value
    assert abs(acc["triton"] - acc["eager-preloaded"]) <= 0.3


# ----------------------------------------------------------------------------------------------------
# GPU: real shapes, tf32, CUDA graphs, torch.compile, the full study's accuracy
# ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("cfg,B", [(c, 128) for c in softmax_regression.STEP_CONFIGS]
                         + [(c, 200) for c in softmax_regression.STEP_CONFIGS]
                         + [(softmax_regression.STEP_CONFIGS[0], b) for b in (1, 96, 1024)], ids=str)
def test_gpu_step_real_shape(cfg, B):
    """Every tuning config (13..49 programs exchanging logits) on the real shape, vs float64."""
    N, K, C = 1100, 784, 10
    x, y, w, b = _data(N, K, C, device="cuda")
    perm = torch.randperm(N, device="cuda")
    w0, b0 = w.clone(), b.clone()
    t = softmax_regression.FusedSGDStep(w, b, x, y, B, 0.1, perm=perm, config=cfg)
    _poison_stats(t.buf)
    t.reset_stats()
    t.step()
    loss, correct, dw, db, w1, b1 = _reference_step(x, y, w0, b0, perm[:B], 0.1)
    assert_close((w0 - w).double().cpu() / 0.1, dw, torch.float32, name="dW", scale=10)
    assert_close(w, w1, torch.float32, name="W'")
    assert_close(b, b1, torch.float32, name="b'")
    l, c = t.read_stats()
    assert abs(l - loss) <= 1e-5 * loss and c == correct


@pytest.mark.gpu
@pytest.mark.parametrize("B", [128, 200])
def test_gpu_tf32_and_uint8(B):
    N, K, C = 1000, 784, 10
    x, y, w, b = _data(N, K, C, device="cuda", u8=True)
    perm = torch.randperm(N, device="cuda")
    for precision in ("ieee", "tf32", "tf32x3"):  # tf32x3: fp32 accuracy (split operands)
        w_, b_ = w.clone(), b.clone()
        t = softmax_regression.FusedSGDStep(w_, b_, x, y, B, 0.1, perm=perm, precision=precision)
        t.step()
        loss, correct, dw, _, w1, b1 = _reference_step(x, y, w, b, perm[:B], 0.1, u8=True)
        tf32 = precision == "tf32"
        assert_close((w - w_).double().cpu() / 0.1, dw, torch.float32, tf32=tf32, name="dW", scale=10)
        assert_close(b_, b1, torch.float32, tf32=tf32, name="b'")
        l, c = t.read_stats()
        assert abs(l - loss) <= (1e-3 if tf32 else 1e-5) * loss and abs(c - correct) <= (2 if tf32 else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,precision,u8", [(softmax_regression.STEP_CONFIGS[0], "ieee", False),
                                              (softmax_regression.STEP_CONFIGS[-1], "ieee", False),
                                              (softmax_regression.STEP_CONFIGS[0], "tf32x3", True)], ids=str)
def test_gpu_many_steps_vs_float64_and_bitwise(cfg, precision, u8):
    """Stress of the cross-program exchange: 3 epochs of 40 steps in launches of every size, bitwise equal to one-step
    launches and to a repeat of itself (the fixed-point sums make the order of arrival irrelevant),
    and within tolerance of float64 training."""
    N, K, C, B, lr = 5000, 784, 10, 128, 0.1
    x, y, w, b = _data(N, K, C, device="cuda", u8=u8)
    w = w * 0.01
    perm = torch.randperm(N, device="cuda")
    runs = []
    for split in ([1] * 120, [40, 40, 40], [7, 33, 1, 79], [120]):
        w_, b_ = w.clone(), b.clone()
        t = softmax_regression.FusedSGDStep(w_, b_, x, y, B, lr, perm=perm, config=cfg, precision=precision)
        for n in split:
            t.steps(n)
        runs.append((_wb(w_, b_), t.read_stats(), t.buf.state.tolist()))
    for r in runs[1:]:
        assert torch.equal(r[0], runs[0][0]) and r[1] == runs[0][1] and r[2] == runs[0][2]
    w_ref, b_ref = _reference_train(x, y, w, b, perm, B, lr, 120, u8=u8)
    assert_close(runs[0][0][:, :K], w_ref, torch.float32, name="W after 120 steps", scale=10)
    assert_close(runs[0][0][:, K], b_ref, torch.float32, name="b after 120 steps", scale=10)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["step", "epoch"])
def test_gpu_graph_matches_launches(mode):
    N, K, C, B = 1000, 784, 10, 128
    x, y, w, b = _data(N, K, C, device="cuda")
    perm = torch.randperm(N)
    init = SoftmaxRegression().state_dict()
    outs = []
    variants = ("triton", "triton+graph") if mode == "step" else ("triton+persistent", "triton+epoch-graph")
    for v in variants + ("eager+graph",):
        m = SoftmaxRegression(device="cuda")
        m.load_state_dict(init)
        t = make_trainer(v, m, x.cpu(), y.cpu(), B, 0.1)
        t.prepare()
        for _ in range(2):
            t.train_epoch(perm)
        outs.append((torch.cat([m.weight.detach(), m.bias.detach()[:, None]], 1), t.read_stats()))
    assert torch.equal(outs[0][0], outs[1][0])  # same kernel, same arithmetic: bitwise
    assert outs[0][1] == outs[1][1]
    assert_close(outs[2][0], outs[0][0], torch.float32, name="eager+graph vs triton", scale=10)


@pytest.mark.gpu
def test_gpu_compile_fullgraph_traces_op():
    N, K, C, B = 512, 784, 10, 128
    x, y, w, b = _data(N, K, C, device="cuda")
    perm = torch.randperm(N, device="cuda")
    buf = softmax_regression.StepBuffers.allocate(B, "cuda")
    w2, b2, buf2 = w.clone(), b.clone(), buf.clone()

    def step(w, b, buf):
        softmax_regression.sgd_step(w, b, x, y, perm, buf, B, 0.1)

    compiled = torch.compile(step, fullgraph=True)
    for _ in range(3):
        step(w, b, buf)
        compiled(w2, b2, buf2)
    torch.testing.assert_close(w2, w, rtol=0, atol=0)
    assert int(buf2.step.item()) == 3


@pytest.mark.gpu
def test_gpu_study_accuracy():
    """The study on the full data: every variant within 0.3 points of eager after 10 epochs (~92 %)."""
    from bench import mnist as bench_mnist

    try:
        mnist_data.find_root()
    except mnist_data.MnistFormatError:
        pytest.skip("real MNIST files not available")
    rc = bench_mnist.main(["--epochs", "10", "--no-write",
                           "--variants", "eager-preloaded,eager+graph,triton,triton+graph,triton+persistent,"
                                         "triton+epoch-graph"])
    assert rc == 0
