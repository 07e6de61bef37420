"""Cross-entropy with the fused gradient and the argmax-correct count: every option against torch's
float64 result (loss and gradient), one-chunk and chunked rows, odd vocabularies, huge logits, ignored
rows, strided inputs, errors (CPU interpreter); bf16, LLM-sized vocabularies and torch.compile on the GPU."""
import pytest
import torch
from torch.nn import functional

from models.layers import CrossEntropyLoss
from triton_kernels import cross_entropy
from triton_kernels import runtime
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, rel_err, tolerance

from .conftest import DEVICE
from .view_matrix import Arg, ViewCase, check_case, view_cases


def _check(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
           grad_scale=None, dtype=None, config=None):
    dtype = dtype or logits.dtype
    x = logits.detach().requires_grad_()
    loss, correct = cross_entropy.cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing,
                                     return_correct=True, config=config)
    x64 = logits.detach().double().cpu().requires_grad_()
    w64 = weight.double().cpu() if weight is not None else None
    ref = functional.cross_entropy(x64, target.cpu().long(), w64, ignore_index=ignore_index, reduction=reduction,
                          label_smoothing=label_smoothing)
    assert loss.shape == ref.shape and loss.dtype == logits.dtype
    assert_close(loss, ref, dtype, name="loss")
    # accuracy: non-ignored rows whose (first) argmax equals the target
    xv = x64.detach() if x64.ndim == 2 else (x64.detach().unsqueeze(0) if x64.ndim == 1 else x64.detach().movedim(1, -1))
    tv = target.cpu().reshape(xv.shape[:-1])
    expect = ((xv.argmax(-1) == tv) & (tv != ignore_index)).sum()
    assert correct.dtype == torch.int64 and correct.ndim == 0 and correct.device == logits.device
    assert correct.item() == expect.item()
    g = torch.randn_like(ref) if grad_scale is None else torch.full_like(ref, grad_scale)
    loss.backward(g.to(loss.device, loss.dtype))
    ref.backward(g.to(loss.dtype).double())
    if dtype == torch.float16 and x.is_cuda:
        # an fp16 gradient of a "mean" over thousands of rows underflows: p_c / n falls below fp16's
        # smallest subnormal (6e-8) for most classes, and torch's own fp16 gradient loses the same. Allow
        # what torch loses (measured on the same inputs), or the table's tolerance, whichever is larger
        xt = logits.detach().requires_grad_()
        wt = weight.to(logits.dtype) if weight is not None else None  # torch wants the logits' dtype
        functional.cross_entropy(xt, target, wt, ignore_index=ignore_index, reduction=reduction,
                        label_smoothing=label_smoothing).backward(g.to(loss.device, loss.dtype))
        scale = max(1.0, 1.5 * rel_err(xt.grad, x64.grad) / tolerance(dtype))
        assert_close(x.grad, x64.grad, dtype, name="dlogits", scale=scale)
    else:
        assert_close(x.grad, x64.grad, dtype, name="dlogits")
    return loss, correct


def _inputs(M, V, dtype=torch.float32, scale=3.0, device=DEVICE, ignore_frac=0.2):
    logits = torch.randn(M, V, device=device, dtype=torch.float32).mul_(scale).to(dtype)
    target = torch.randint(0, V, (M,), device=device)
    target[torch.rand(M, device=device) < ignore_frac] = -100
    return logits, target


def _chunks(block_v: int, reg_db: bool) -> Config:
    """The chunked kernel in chunks of block_v (rows of at most block_v classes: the row kernel)."""
    return Config({"BLOCK_V": block_v, "PER_SM": 2, "REG_DB": int(reg_db)}, 4, 1)


# one_chunk: the interpreter's tuned choice (the row kernel up to 1024 classes); chunked_db: chunks of 8
# (several per row on small vocabularies), the sweeps loading chunk i + 1 into registers before reducing
# chunk i (the chunked sweep without double-buffering runs in test_views and test_extreme_values: CHUNKED)
VARIANTS = {"one_chunk": None, "chunked_db": _chunks(8, True)}


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    """The launch config of the variant (None: the tuned one)."""
    return VARIANTS[request.param]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
@pytest.mark.parametrize("V", [3, 17, 1000])
def test_loss_grad_correct(V, reduction, dtype, variant):
    if variant is not None and V > 100:
        pytest.skip("slow in the interpreter; long rows are chunked in test_vocab_32001_chunked")
    logits, target = _inputs(23, V, dtype)
    _check(logits, target, reduction=reduction, config=variant)


@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
@pytest.mark.parametrize("smoothing,weighted", [(0.1, False), (1.0, True)])  # (0.1, True): test_views
def test_label_smoothing_and_weights(reduction, smoothing, weighted, variant):
    logits, target = _inputs(19, 37)
    weight = torch.rand(37, device=DEVICE) + 0.25 if weighted else None
    _check(logits, target, weight, reduction=reduction, label_smoothing=smoothing, config=variant)


@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
def test_class_weights(reduction, variant):
    logits, target = _inputs(31, 10)
    _check(logits, target, torch.rand(10, device=DEVICE) * 2, reduction=reduction, config=variant)


def test_vocab_32001_chunked():
    logits, target = _inputs(3, 32001)
    _check(logits, target, label_smoothing=0.05)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_huge_logits(reduction, variant):
    logits, target = _inputs(16, 50, scale=1e4)
    _check(logits, target, reduction=reduction, label_smoothing=0.1, config=variant)


@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
def test_all_rows_ignored(reduction):
    logits = torch.randn(6, 9, device=DEVICE)
    target = torch.full((6,), 3, device=DEVICE)
    x = logits.clone().requires_grad_()
    loss, correct = cross_entropy.cross_entropy(x, target, ignore_index=3, reduction=reduction, return_correct=True)
    ref = functional.cross_entropy(logits.double(), target, ignore_index=3, reduction=reduction)
    # torch: mean over zero rows is NaN, sum is 0, none is all zeros
    assert torch.equal(torch.isnan(loss.cpu()), torch.isnan(ref)) and correct.item() == 0
    if reduction != "mean":
        assert torch.equal(loss.double().cpu(), ref)
    loss.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    # with smoothing too
    x.grad = None
    cross_entropy.cross_entropy(x, target, ignore_index=3, reduction="sum", label_smoothing=0.2).backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def _check_nonfinite_ignored(value, V, config=None):
    """An ignored row adds 0 to the loss whatever its logits hold (torch's semantics): a NaN or inf in a padding
    row leaves the other rows' loss finite; its own gradient row is NaN, as torch's."""
    logits, target = _inputs(12, V, ignore_frac=0.0)
    target[[2, 7]] = -100
    logits[2, 0], logits[7, 4] = value, value
    weight = torch.rand(V, device=DEVICE) + 0.5
    for w in (None, weight):
        for reduction in cross_entropy.REDUCTIONS:
            for smoothing in (0.0, 0.1):
                x = logits.clone().requires_grad_()
                loss = cross_entropy.cross_entropy(x, target, w, reduction=reduction, label_smoothing=smoothing,
                                                   config=config)
                x64 = logits.double().requires_grad_()
                ref = functional.cross_entropy(x64, target, None if w is None else w.double(), reduction=reduction,
                                               label_smoothing=smoothing)
                assert torch.isfinite(loss).all()
                assert_close(loss, ref, torch.float32)
                loss.sum().backward()
                ref.sum().backward()
                _assert_same_nonfinite(x.grad, x64.grad)


def _check_nonfinite_kept(V, config=None):
    """A NaN logit makes its row's loss and gradient NaN; +inf and -inf give torch's inf / NaN (row kernel and
    chunked kernel alike: the chunked sweep's running maximum keeps the NaN)."""
    logits, target = _inputs(6, V, ignore_frac=0.0)
    target[:] = torch.tensor([1, 2, 3, 4, 5, 6])
    logits[0, 0], logits[2, 13], logits[3, 9], logits[4, 5] = float("nan"), float("inf"), -float("inf"), -float("inf")
    for smoothing in (0.0, 0.1):
        x = logits.clone().requires_grad_()
        loss = cross_entropy.cross_entropy(x, target, reduction="none", label_smoothing=smoothing, config=config)
        x64 = logits.double().requires_grad_()
        ref = functional.cross_entropy(x64, target, reduction="none", label_smoothing=smoothing)
        loss.sum().backward()
        ref.sum().backward()
        _assert_same_nonfinite(loss, ref)
        _assert_same_nonfinite(x.grad, x64.grad)


def _assert_same_nonfinite(ours, ref):
    """NaN and inf where ref has them, the finite values close to ref's."""
    ref = ref.to(ours.device)
    assert torch.equal(torch.isnan(ours), torch.isnan(ref)) and torch.equal(torch.isinf(ours), torch.isinf(ref))
    keep = torch.isfinite(ref)
    assert_close(ours[keep], ref[keep], torch.float32)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_logits_in_ignored_rows(value, variant):
    _check_nonfinite_ignored(value, 9, variant)


def test_nonfinite_logits_in_kept_rows(variant):
    _check_nonfinite_kept(20, variant)


def test_custom_ignore_index_and_int32_targets(variant):
    logits, target = _inputs(20, 12)
    target[target == -100] = 7
    target[::3] = 7
    _check(logits, target.to(torch.int32), ignore_index=7, label_smoothing=0.1, config=variant)


def test_grad_output_scales_gradient():
    logits, target = _inputs(11, 13)
    _check(logits, target, grad_scale=3.5)
    _check(logits, target, grad_scale=1.0)
    _check(logits, target, reduction="sum", grad_scale=-0.25)


def test_strided_and_shaped_inputs(variant):
    base = torch.randn(30, 50, device=DEVICE)
    target = torch.randint(0, 40, (10,), device=DEVICE)
    _check(base[::3, 5:45], target, label_smoothing=0.1, config=variant)            # row stride 150
    _check(torch.randn(40, 10, device=DEVICE).t(), target, config=variant)          # class stride 10
    _check(torch.randn(7, device=DEVICE), torch.tensor(4, device=DEVICE), config=variant)  # (C,), 0-dim target
    t3 = torch.randint(0, 5, (3, 4), device=DEVICE)
    _check(torch.randn(3, 5, 4, device=DEVICE), t3, reduction="none", config=variant)  # (N, C, d)
    _check(torch.randn(3, 5, 4, device=DEVICE), t3, config=variant)


def test_accuracy_ties_take_first_max():
    logits = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0], [0.0, 0.0, 5.0]], device=DEVICE)
    target = torch.tensor([1, 1, 2], device=DEVICE)
    _, correct = cross_entropy.cross_entropy(logits, target, return_correct=True)
    assert correct.item() == 2


@pytest.mark.parametrize("weighted", [False, True])
def test_mean_denominator_from_prologue(weighted):
    """As for large M * programs: the "mean" denominator comes from the one-program prologue kernel."""
    prologue = Config({"BLOCK_V": 64, "PER_SM": 2, "DENOM_IN_KERNEL": 0}, 4, 1)
    logits, target = _inputs(29, 40)
    _check(logits, target, torch.rand(40, device=DEVICE) + 0.5 if weighted else None, config=prologue)


def test_target_is_max_with_ties(variant):
    """Rows whose target holds the maximum (the first-argmax search runs), some tied with an earlier or
    a later class: loss, gradient (the target column is written last) and correct count."""
    logits, target = _inputs(24, 37, ignore_frac=0.0)
    top = logits.max(1).values
    for i in range(0, 24, 2):                      # every other row: the target is a maximum
        logits[i, target[i]] = top[i] + 1.0
    for i, j in ((0, 0), (4, 36), (8, 5)):         # ties: a class before / after the target
        logits[i, j] = logits[i, target[i]]
    _check(logits, target, config=variant)
    _check(logits, target, label_smoothing=0.2, reduction="sum", config=variant)


@pytest.mark.parametrize("reg_db", [False, True])
def test_accuracy_ties_across_chunks(reg_db):
    """Chunked rows keep a per-lane first maximum; the row's argmax is the smallest such index."""
    logits = torch.randn(4, 13, device=DEVICE)
    logits[0, [6, 8, 12]] = 9.0    # lane 2 of chunk 1 comes before lane 0 of chunk 2
    logits[1, [3, 4]] = 9.0        # last lane of chunk 0 vs first lane of chunk 1
    logits[2, [1, 5, 9]] = 9.0     # the same lane in three chunks
    logits[3, 12] = 9.0            # the maximum in the ragged last chunk
    want = torch.tensor([6, 3, 1, 12], device=DEVICE)
    for shift, n_correct in ((0, 4), (1, 0)):
        _, correct = cross_entropy.cross_entropy(logits, (want + shift) % 13, return_correct=True,
                                                 config=_chunks(4, reg_db))
        assert correct.item() == n_correct


@pytest.mark.parametrize("reg_db", [False, True])
def test_minus_inf_logits_chunked(reg_db):
    """-inf logits (masked classes) are skipped by the chunked online sum: finite loss and gradient."""
    logits = torch.randn(5, 11, device=DEVICE)
    logits[:, :5] = -float("inf")
    target = torch.randint(5, 11, (5,), device=DEVICE)
    x = logits.clone().requires_grad_()
    loss = cross_entropy.cross_entropy(x, target, config=_chunks(4, reg_db))
    loss.backward()
    x64 = logits.double().requires_grad_()
    ref = functional.cross_entropy(x64, target)
    ref.backward()
    assert_close(loss, ref.detach(), torch.float32)
    assert_close(x.grad, x64.grad, torch.float32)


def test_no_grad_and_empty_batch():
    logits, target = _inputs(9, 21)
    with torch.no_grad():
        loss = cross_entropy.cross_entropy(logits.requires_grad_(), target)
    assert_close(loss, functional.cross_entropy(logits.detach().double(), target), torch.float32)
    empty = torch.randn(0, 5, device=DEVICE)
    et = torch.zeros(0, dtype=torch.long, device=DEVICE)
    assert torch.isnan(cross_entropy.cross_entropy(empty, et))
    assert cross_entropy.cross_entropy(empty, et, reduction="sum").item() == 0


def test_backward_twice_is_refused():
    logits, target = _inputs(4, 6, ignore_frac=0.0)
    x = logits.requires_grad_()
    loss = cross_entropy.cross_entropy(x, target)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="only once"):
        loss.backward()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_double_backward_is_refused(reduction):
    """The gradient is written by the forward kernel, so create_graph=True raises a RuntimeError saying so
    -- on the first call of a signature, its prepared calls and the registered op torch.compile traces
    alike -- instead of returning a gradient detached from the graph; a plain backward of the same
    signature still gives torch's gradient."""
    logits, target = _inputs(4, 6, ignore_frac=0.0)

    def registered_op(x):
        loss = cross_entropy._cross_entropy_call(x, target, None, -100, reduction, 0.0, True, "", False)[0]
        return loss.sum()

    calls = [lambda x: cross_entropy.cross_entropy(x, target, reduction=reduction).sum()] * 3 + [registered_op]
    for call in calls:
        x = logits.clone().requires_grad_()
        with pytest.raises(RuntimeError, match="double backward is not supported by cross_entropy"):
            torch.autograd.grad(call(x), x, create_graph=True)
    x = logits.clone().requires_grad_()
    grad, = torch.autograd.grad(cross_entropy.cross_entropy(x, target, reduction=reduction).sum(), x)
    x64 = logits.double().requires_grad_()
    expect, = torch.autograd.grad(functional.cross_entropy(x64, target, reduction=reduction).sum(), x64)
    assert_close(grad, expect, torch.float32)


def test_module_matches_nn_and_trains():
    torch.manual_seed(0)
    w = torch.rand(4) + 0.5
    ours = CrossEntropyLoss(weight=w, label_smoothing=0.1, return_correct=True)
    ref = torch.nn.CrossEntropyLoss(weight=w.double(), label_smoothing=0.1)
    assert isinstance(ours, torch.nn.CrossEntropyLoss) and list(ours.state_dict()) == list(ref.state_dict())
    lin = torch.nn.Linear(8, 4)
    x, y = torch.randn(24, 8), torch.randint(0, 4, (24,))
    opt = torch.optim.SGD(lin.parameters(), lr=0.5)
    first = None
    for _ in range(6):
        opt.zero_grad()
        loss, correct = ours(lin(x), y)
        assert_close(loss, ref(lin(x).double(), y), torch.float32)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first and 0 <= correct.item() <= 24


@pytest.mark.parametrize("bad,match", [
    (lambda x, t: cross_entropy.cross_entropy(x, t[:3]), "target has shape"),
    (lambda x, t: cross_entropy.cross_entropy(x.double(), t), "logits has dtype"),
    (lambda x, t: cross_entropy.cross_entropy(x, t.float()), "integer class indices"),
    (lambda x, t: cross_entropy.cross_entropy(x, t.to(torch.int16)), "target has dtype"),
    (lambda x, t: cross_entropy.cross_entropy(x, t.to("meta")), "target is on meta"),
    (lambda x, t: cross_entropy.cross_entropy(x, torch.full_like(t, 6)), "outside \\[0, 6\\)"),
    (lambda x, t: cross_entropy.cross_entropy(x, torch.full_like(t, -2)), "outside \\[0, 6\\)"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, weight=torch.ones(5)), "weight has 5 elements"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, reduction="avg"), "reduction must be"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, label_smoothing=1.5), "label_smoothing must be"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, ignore_index=1.0), "ignore_index must be an int"),
    (lambda x, t: cross_entropy.cross_entropy(torch.tensor(1.0), t), "at least 1 dim"),
    (lambda x, t: cross_entropy.cross_entropy(x[:, :0], torch.full_like(t, -100)), "have no classes"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, config=Config({"BLOCK_V": 6, "PER_SM": 2})), "BLOCK_V must be a"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, config=Config({"BLOCK_N": 8})), "config must name BLOCK_V"),
    (lambda x, t: cross_entropy.cross_entropy(x, t, config=Config({"BLOCK_V": 4, "PER_SM": 2, "PREFETCH": 1})),
     "PREFETCH is for rows held whole"),
    (lambda x, t: cross_entropy.cross_entropy_forward(x, t, config=Config({"BLOCK_V": 8, "PER_SM": 0})),
     "PER_SM a positive"),
])
def test_bad_input_raises(bad, match):
    x, t = torch.randn(4, 6), torch.randint(0, 6, (4,))
    with pytest.raises(ValueError, match=match):
        bad(x, t)


@pytest.mark.skipif(DEVICE != "cpu", reason="interpreter only")
def test_bfloat16_refused_in_interpreter():
    with pytest.raises(ValueError, match="interpreter cannot compute"):
        cross_entropy.cross_entropy(torch.randn(4, 6, dtype=torch.bfloat16), torch.randint(0, 6, (4,)))


def _picks() -> int:
    return sum(tuner.picks for tuner in runtime.ALL_TUNERS.values())


def test_steady_state_asks_no_tuner():
    """The launch plan of a key (M and V rounded up to powers of two, dtype, options) is found once,
    through the tuner; repeated forward + backward calls then ask no tuner, nor does a call with
    ``config=``. (3-4 rows of 100 classes: a key no other test of this file makes.)"""
    x, target = _inputs(3, 100, ignore_frac=0.0)
    x.requires_grad_()
    weight = torch.rand(100, device=DEVICE) + 0.5
    before = _picks()
    cross_entropy.cross_entropy(x, target).backward()
    assert _picks() - before == 1
    before = _picks()
    for i in range(4):  # the second call of each option set finds its plan kept
        loss, _ = cross_entropy.cross_entropy(x, target, weight, label_smoothing=0.1 * (i % 2), return_correct=True)
        loss.backward()
    assert _picks() - before == 2
    before = _picks()
    x4, target4 = _inputs(4, 100)
    for logits, t in ((x4.requires_grad_(), target4), (x, target)):  # 3 and 4 rows share a plan
        cross_entropy.cross_entropy(logits, t).backward()
        cross_entropy.cross_entropy(logits, t, weight, label_smoothing=0.1).backward()
        cross_entropy.cross_entropy(logits, t, config=_chunks(32, True)).backward()
    assert _picks() == before


def test_unchecked_out_of_range_target_gives_nan():
    x, t = torch.randn(4, 6), torch.randint(0, 6, (4,))
    t[1] = 9
    loss = cross_entropy.cross_entropy(x, t, check_target=False, reduction="none")
    assert torch.isnan(loss[1]) and torch.isfinite(loss[[0, 2, 3]]).all()


# ---------------------------------------------------------------------------------------------- views
# Every argument in every layout (tests/view_matrix.py): loss and dlogits against float64, through the
# public function (its tuned one-chunk kernel) and through the launcher with a chunked configuration
# (13 classes in chunks of 8: the second ragged; no register double-buffering: the `variant` fixture
# covers that). Class weights and label
# smoothing everywhere; rows whose target is the largest drawn class are ignored (except with an
# expanded target, where every row would be). On the CPU (interpreter time): fp32 through the public
# function with every reduction, fp16 with "mean" (the one that reads the targets twice), the chunked
# path with "mean" and "none"; on the GPU every combination, bf16 too.
VIEW_V = 13
CHUNKED = _chunks(8, False)


def _view_args(logits_grad: bool) -> dict:
    return {"logits": Arg((6, VIEW_V), broadcast=(0,), grad=logits_grad),
            "target": Arg((6,), broadcast=(0,), grad=False, values=f"index:{VIEW_V}"),
            "weight": Arg((VIEW_V,), broadcast=(0,), grad=False)}


def _positive_(weight: torch.Tensor) -> None:
    """Class weights drawn from randn, made |w| in place through the view's base (an expanded view cannot
    be written through): a "mean" denominator sum_i w_{t_i} of mixed signs could cancel."""
    (weight._base if weight._base is not None else weight).abs_()


def _ignore_index(target: torch.Tensor) -> int:
    return -100 if target.stride(0) == 0 else int(target.max())


def view_case(arg: str, layout: str, dtype_name: str, reduction: str, path: str, device: str = DEVICE) -> None:
    """One (argument, layout) case: path "public" (cross_entropy + autograd: the gradient of the base
    for a random upstream gradient) or "chunked" (cross_entropy_forward with CHUNKED: loss and the
    gradient it returns, that of the reduced loss for an upstream gradient of 1)."""
    kw = dict(reduction=reduction, label_smoothing=0.1)

    def ref(logits, target, weight):
        _positive_(weight)
        kw["ignore_index"] = _ignore_index(target)
        if path == "public":
            return functional.cross_entropy(logits, target, weight, **kw)
        x = logits.detach().clone().requires_grad_()
        loss = functional.cross_entropy(x, target, weight, **kw)
        return loss, torch.autograd.grad(loss.sum(), x)[0]

    def fn(logits, target, weight):
        _positive_(weight)
        ignore = _ignore_index(target)
        if path == "public":
            return cross_entropy.cross_entropy(logits, target, weight, ignore_index=ignore, **kw)
        loss, _, grad = cross_entropy.cross_entropy_forward(logits, target, weight, ignore_index=ignore, config=CHUNKED,
                                                            **kw)
        return loss, grad

    check_case(ViewCase(arg, layout), _view_args(path == "public"), fn, ref, dtype=getattr(torch, dtype_name),
               device=device)


_VIEW_PARAMS = [(c, "float32", r, "public") for r in cross_entropy.REDUCTIONS for c in view_cases(_view_args(True))]
_VIEW_PARAMS += [(c, "float16", "mean", "public") for c in view_cases(_view_args(True))]
_VIEW_PARAMS += [(c, "float32", r, "chunked") for r in ("mean", "none") for c in view_cases(_view_args(True))]


@pytest.mark.parametrize("case,dtype_name,reduction,path", _VIEW_PARAMS, ids=lambda v: str(v))
def test_views(case, dtype_name, reduction, path):
    view_case(case.arg, case.layout, dtype_name, reduction, path)


@pytest.mark.gpu
@pytest.mark.parametrize("V", [20, 50000])  # the row kernel; the chunked one (tuned)
def test_gpu_nonfinite_logits(V):
    for value in (float("nan"), float("inf"), -float("inf")):
        _check_nonfinite_ignored(value, V)
    _check_nonfinite_kept(V)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["public", "chunked"])
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", view_cases(_view_args(True)), ids=str)
def test_gpu_views(case, dtype_name, reduction, path, isolated):
    isolated("tests.test_cross_entropy:view_case", case.arg, case.layout, dtype_name, reduction, path, "cuda")


# ---------------------------------------------------------------------------------------------- extremes
# The reduction at extreme values, against float64, no looser than twice torch's own float32 error on
# the same input (or the table's tolerance): logits sharing a large offset (each row +-1e4, +-3e4 or
# +-1e5, + 3 randn) and logits near the fp32 maximum (each row +-3e38 + 3e34 randn: the loss, up to
# ~1e36, is representable).
def extreme_case(kind: str, reduction: str, weighted: bool, path: str, device: str = DEVICE) -> None:
    M, V = 9, 21
    sign = torch.where(torch.rand(M, 1) < 0.5, -1.0, 1.0)
    if kind == "pm3e38":
        logits = sign * 3e38 + 3e34 * torch.randn(M, V)
    else:
        offset = torch.tensor([1e4, 3e4, 1e5])[torch.arange(M) % 3, None]
        logits = sign * offset + 3.0 * torch.randn(M, V)
    logits = logits.to(device)
    target = torch.randint(0, V, (M,), device=device)
    target[torch.rand(M, device=device) < 0.2] = -100
    weight = torch.rand(V, device=device) + 0.5 if weighted else None
    kw = dict(reduction=reduction, label_smoothing=0.1)
    x64 = logits.double().cpu().requires_grad_()
    ref = functional.cross_entropy(x64, target.cpu(), weight.double().cpu() if weighted else None, **kw)
    (g64,) = torch.autograd.grad(ref.sum(), x64)
    x32 = logits.clone().requires_grad_()
    loss32 = functional.cross_entropy(x32, target, weight, **kw)
    (g32,) = torch.autograd.grad(loss32.sum(), x32)
    if path == "public":
        x = logits.clone().requires_grad_()
        loss = cross_entropy.cross_entropy(x, target, weight, **kw)
        (grad,) = torch.autograd.grad(loss.sum(), x)
    else:
        loss, _, grad = cross_entropy.cross_entropy_forward(logits, target, weight, config=CHUNKED, **kw)
    for name, ours, torchs, expect in (("loss", loss, loss32, ref), ("dlogits", grad, g32, g64)):
        err, torch_err = rel_err(ours, expect), rel_err(torchs, expect)
        bound = max(2 * torch_err, tolerance(torch.float32))
        assert err <= bound, f"{kind} {name}: relative error {err:.2e} > {bound:.1e} (torch float32: {torch_err:.1e})"


@pytest.mark.parametrize("path", ["public", "chunked"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
@pytest.mark.parametrize("kind", ["offset", "pm3e38"])
def test_extreme_values(kind, reduction, weighted, path):
    extreme_case(kind, reduction, weighted, path)


def all_ignored_case(reduction: str, path: str, device: str = DEVICE) -> None:
    """Every row ignored, with class weights and smoothing: torch's loss (NaN for "mean", 0 otherwise)
    and a zero gradient."""
    logits = torch.randn(7, 9, device=device)
    target = torch.full((7,), 4, device=device)
    weight = torch.rand(9, device=device) + 0.5
    kw = dict(ignore_index=4, reduction=reduction, label_smoothing=0.2)
    ref = functional.cross_entropy(logits, target, weight, **kw)
    if path == "public":
        x = logits.clone().requires_grad_()
        loss = cross_entropy.cross_entropy(x, target, weight, **kw)
        (grad,) = torch.autograd.grad(loss.sum(), x)
    else:
        loss, _, grad = cross_entropy.cross_entropy_forward(logits, target, weight, config=CHUNKED, **kw)
    assert torch.equal(torch.isnan(loss), torch.isnan(ref))
    assert torch.equal(torch.nan_to_num(loss), torch.nan_to_num(ref)) and torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("path", ["public", "chunked"])
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
def test_extreme_all_rows_ignored(reduction, path):
    all_ignored_case(reduction, path)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["public", "chunked"])
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
@pytest.mark.parametrize("kind", ["offset", "pm3e38"])
def test_gpu_extreme_values(kind, reduction, path, isolated):
    isolated("tests.test_cross_entropy:extreme_case", kind, reduction, True, path, "cuda")
    isolated("tests.test_cross_entropy:all_ignored_case", reduction, path, "cuda")


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,V", [(8192, 32000), (4096, 50257), (64, 262144), (128, 10), (1000, 3), (333, 32001)])
def test_gpu_sizes(M, V, dtype):
    logits, target = _inputs(M, V, dtype, device="cuda")
    _check(logits, target)
    # fp16 cannot hold the summed loss of thousands of rows (~10 each; fp16 max 65504: inf, in torch too)
    red = "mean" if dtype == torch.float16 else "sum"
    _check(logits, target, torch.rand(V, device="cuda") + 0.5, label_smoothing=0.1, reduction=red)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [
    Config({"BLOCK_V": 32768, "PER_SM": 1, "PREFETCH": 1}, 16, 1),   # the row in registers, L2 prefetch
    Config({"BLOCK_V": 32768, "PER_SM": 1, "PREFETCH": 0}, 16, 1),
    Config({"BLOCK_V": 8192, "PER_SM": 1, "REG_DB": 1}, 16, 1),      # chunked, register double-buffering
    Config({"BLOCK_V": 4096, "PER_SM": 2, "REG_DB": 0}, 8, 2),
], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_tuning_candidates(config, dtype):
    """Each kind of tuned candidate, chosen by config=, at an LLM-sized vocabulary: with and without
    class weights and smoothing."""
    logits, target = _inputs(1024, 32000, dtype, device="cuda")
    _check(logits, target, config=config)
    _check(logits, target, torch.rand(32000, device="cuda") + 0.5, label_smoothing=0.1, reduction="sum",
           config=config)


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", cross_entropy.REDUCTIONS)
def test_gpu_options(reduction):
    logits, target = _inputs(2048, 5000, torch.bfloat16, device="cuda", scale=1e4)
    _check(logits, target, reduction=reduction, label_smoothing=0.1)
    base = torch.randn(1024, 3000, device="cuda")
    _check(base[::2, 7:2007], torch.randint(0, 2000, (512,), device="cuda"), reduction=reduction)
    with pytest.raises(ValueError, match="outside"):
        cross_entropy.cross_entropy(logits, torch.full_like(target, 5000), check_target=True)


@pytest.mark.gpu
def test_gpu_all_ignored_and_no_host_sync():
    logits = torch.randn(256, 100, device="cuda", requires_grad=True)
    target = torch.full((256,), -100, device="cuda")
    loss, correct = cross_entropy.cross_entropy(logits, target, return_correct=True)
    assert torch.isnan(loss).item() and correct.item() == 0
    # the forward enqueues kernels only (no host sync): capturable in a CUDA graph
    x = torch.randn(128, 10, device="cuda", requires_grad=True)
    t = torch.randint(0, 10, (128,), device="cuda")
    cross_entropy.cross_entropy(x, t, return_correct=True)[0].backward()  # warm-up (autotune) outside the capture
    graph, (loss, correct) = runtime.capture_graph(lambda: cross_entropy.cross_entropy(x, t, return_correct=True),
                                                   warmup=1)
    graph.replay()
    torch.cuda.synchronize()
    assert_close(loss, functional.cross_entropy(x.detach().double(), t), torch.float32)


@pytest.mark.gpu
def test_gpu_compile_fullgraph():
    torch._dynamo.reset()
    head = torch.nn.Linear(64, 1000).cuda()
    crit = CrossEntropyLoss(label_smoothing=0.1, return_correct=True)

    def step(x, t):
        loss, correct = crit(head(x), t)
        return loss, correct

    x = torch.randn(256, 64, device="cuda")
    t = torch.randint(0, 1000, (256,), device="cuda")
    compiled = torch.compile(step, fullgraph=True)
    loss, correct = compiled(x, t)
    ref = functional.cross_entropy(head(x).double(), t, label_smoothing=0.1)
    assert_close(loss, ref, torch.float32, tf32=True)
    loss.backward()
    assert torch.isfinite(head.weight.grad).all()
    assert correct.item() == (head(x).argmax(1) == t).sum().item()
    assert torch._dynamo.explain(step)(x, t).graph_break_count == 0
