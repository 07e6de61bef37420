"""conv1d (channels-last implicit GEMM) and Char-CNN's first layer (gather-sum over character indices)
against float64: forward with fused bias / ReLU / MaxPool, every gradient (dx, dw, dbias), k = 3 and 7,
odd channel counts and lengths, forced small tiles, the view/stride matrix, the gather vs a dense one-hot
conv, the fused LayerNorm -> ReLU -> MaxPool kernels, NaN, errors (CPU interpreter); bf16, Char-CNN sizes,
the tuner and torch.compile on the GPU."""
import pytest
import torch
from torch.nn import functional

from triton_kernels import conv1d
from triton_kernels import conv1d_gather
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, assert_fast_path_repeats, cudnn_tf32, poison_, rel_err, tolerance

from .conftest import DEVICE
from .view_matrix import Arg, check_case, view_cases

SMALL_TILES = conv1d._cfg(16, 16, 16, 4, 1)
SMALL_GATHER_TILES = Config({"BLOCK_M": 16, "BLOCK_N": 16}, 4, 1)
DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def ref_conv(x, weight, bias=None, activation="none", pool=1):
    """The float64-able torch reference on channels-last x (B, L, C)."""
    z = functional.conv1d(x.transpose(1, 2), weight, bias)
    if activation == "relu":
        z = functional.relu(z)
    if pool > 1:
        z = functional.max_pool1d(z, pool, pool)
    return z.transpose(1, 2)


def one_hot_cl(indices, channels, dtype):
    """(B, L, channels) one-hot of indices; an index outside [0, channels) is an all-zero row."""
    cols = torch.arange(channels, device=indices.device)
    return (indices.long()[..., None] == cols).to(dtype)


def _check_conv(B, L, C, N, k, activation, dtype, device=DEVICE, precision="ieee", scale=1.0):
    x = torch.randn(B, L, C, device=device, dtype=dtype)
    w = torch.randn(N, C, k, device=device, dtype=dtype) / (C * k) ** 0.5
    b = torch.randn(N, device=device, dtype=dtype)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = conv1d.conv1d(*leaves, activation=activation, precision=precision)
    refs = [t.detach().double().cpu().requires_grad_() for t in (x, w, b)]
    r = ref_conv(*refs, activation)
    assert y.shape == r.shape and y.dtype == dtype
    tf32 = precision == "tf32"
    assert_close(y, r, dtype, tf32=tf32, scale=scale, name="y")
    if activation == "relu":
        # The gradient through ReLU's mask of OUR output: where a pre-activation is within rounding of 0 the
        # two masks may differ, and one flipped element among ~1e5 moves dx by ~1e-3 (seen on the GPU at
        # Char-CNN sizes in fp32); the masked product itself is what the kernels must get right.
        r = ref_conv(*refs) * (y.detach().cpu().double() > 0)
    g = torch.randn(r.shape, dtype=torch.float64)
    y.backward(g.to(device, dtype))
    r.backward(g)
    for name, t, ref in zip(("dx", "dw", "dbias"), leaves, refs):
        assert t.grad.dtype == t.dtype and t.grad.shape == t.shape
        assert_close(t.grad, ref.grad, dtype, tf32=tf32, scale=scale, name=name)


@pytest.mark.parametrize("B,L,C,N,k,activation,dtype", [
    (2, 9, 5, 7, 3, "relu", torch.float32),
    (1, 20, 33, 17, 7, "none", torch.float32),
    (3, 6, 16, 40, 3, "relu", torch.float16),
    (2, 13, 3, 9, 7, "relu", torch.float16),
])
def test_forward_backward(B, L, C, N, k, activation, dtype):
    _check_conv(B, L, C, N, k, activation, dtype)


@pytest.mark.parametrize("k,pool,dtype", [(7, 3, torch.float32), (3, 2, torch.float16)])
def test_pool_epilogue(k, pool, dtype):
    """max_pool1d(relu(conv + bias)) in the epilogue; L_out not a multiple of the pool (rows dropped)."""
    x = torch.randn(3, 25, 6, device=DEVICE, dtype=dtype)
    w = torch.randn(11, 6, k, device=DEVICE, dtype=dtype)
    b = torch.randn(11, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        y = conv1d.conv1d(x, w, b, "relu", pool=pool)
        y_none = conv1d.conv1d(x, w, None, "none", pool=pool)
    assert_close(y, ref_conv(x.double(), w.double(), b.double(), "relu", pool), dtype)
    assert_close(y_none, ref_conv(x.double(), w.double(), None, "none", pool), dtype)


def test_small_tiles_every_dim():
    """Forced 16 x 16 x 16 tiles: several tiles along rows (crossing samples), channels and K, grouped order."""
    x = torch.randn(2, 14, 20, device=DEVICE)
    w = torch.randn(18, 20, 3, device=DEVICE)
    b = torch.randn(18, device=DEVICE)
    for pool in (1, 3):
        y = conv1d.conv1d_forward(x, w, b, "relu", pool, config=SMALL_TILES)
        assert_close(y, ref_conv(x.double(), w.double(), b.double(), "relu", pool), torch.float32)
    dz = torch.randn(2, 12, 18, device=DEVICE)
    dx = conv1d.conv1d_forward(dz, w, None, pad=2, flip=True, swap_weight=True, config=SMALL_TILES)
    ref_dx = torch.nn.grad.conv1d_input((2, 20, 14), w.double(), dz.double().transpose(1, 2)).transpose(1, 2)
    assert_close(dx, ref_dx, torch.float32, name="dx")
    dw = conv1d.conv1d_weight_grad(x, dz, 3, 20,
                                   config=conv1d.Config({"BLOCK_C": 16, "BLOCK_N": 16, "BLOCK_M": 16}, 4, 1))
    ref_dw = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), w.shape, dz.double().transpose(1, 2))
    assert_close(dw.permute(2, 1, 0), ref_dw, torch.float32, name="dw")


@pytest.mark.parametrize("path", ["pointer", "tma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_weight_grad_paths(path, dtype):
    """Both weight-gradient kernels against float64 with forced 16-row blocks: three blocks per sample, the last
    partial (the TMA kernel's zero-filled dz rows), splits that cut a sample, two channel tiles."""
    x = torch.randn(3, 40, 24, device=DEVICE, dtype=dtype)
    dz = torch.randn(3, 38, 16, device=DEVICE, dtype=dtype)
    cfg = conv1d.Config({"BLOCK_C": 16, "BLOCK_N": 16, "BLOCK_M": 16}, 4, 1)
    dw = conv1d.conv1d_weight_grad(x, dz, 3, 24, path=path, config=cfg)
    ref = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), (16, 24, 3), dz.double().transpose(1, 2))
    assert dw.shape == (3, 24, 16) and dw.dtype == torch.float32
    assert_close(dw.permute(2, 1, 0), ref, dtype, name="dw")


def test_weight_grad_tma_refuses_what_it_cannot_read():
    """path="tma" on a length-sliced x (its rows not one matrix), a channels-first dz, an expanded x (stride 0) or
    indices: a ValueError before any launch; an unknown path is named; no channels: zeros."""
    x = torch.randn(2, 12, 8, device=DEVICE)
    dz = torch.randn(2, 10, 8, device=DEVICE)
    channels_first_dz = dz.transpose(1, 2).contiguous().transpose(1, 2)
    expanded_x = x[:1, :1].expand(2, 12, 8)
    for bad_x, bad_dz, index in ((x[:, 1:], dz[:, 1:], False), (x, channels_first_dz, False), (expanded_x, dz, False),
                                 (torch.zeros(2, 12, dtype=torch.uint8, device=DEVICE), dz, True)):
        with pytest.raises(ValueError, match="path='tma'"):
            conv1d.conv1d_weight_grad(bad_x, bad_dz, 3, 8, x_is_index=index, path="tma")
    with pytest.raises(ValueError, match="path"):
        conv1d.conv1d_weight_grad(x, dz, 3, 8, path="gather")
    for path in conv1d.DW_PATHS:  # nothing to sum: zeros, on any path
        no_n = conv1d.conv1d_weight_grad(x, dz[..., :0], 3, 8, path=path)
        no_c = conv1d.conv1d_weight_grad(x[..., :0], dz, 3, 0, path=path)
        assert torch.equal(no_n, torch.zeros(3, 8, 0, device=DEVICE))
        assert torch.equal(no_c, torch.zeros(3, 0, 8, device=DEVICE))


def test_steady_state_asks_no_tuner(monkeypatch):
    """The first call of a conv shape finds its config through the tuner; later calls launch its plan."""
    monkeypatch.setattr(conv1d, "_PLANS", {})
    x = torch.randn(2, 20, 8, device=DEVICE)
    w, b = torch.randn(12, 8, 3, device=DEVICE), torch.randn(12, device=DEVICE)
    before = conv1d._conv_tuner.picks
    with torch.no_grad():
        first = conv1d.conv1d(x, w, b, "relu")
        assert conv1d._conv_tuner.picks - before == 1
        for _ in range(3):
            assert torch.equal(conv1d.conv1d(x, w, b, "relu"), first)
    assert conv1d._conv_tuner.picks - before == 1 and len(conv1d._PLANS) == 1


def test_fast_path_matches_the_general_path():
    """A signature's second call runs the fast path (conv1d_eager: its own autograd node) and gives the first
    call's output and gradients exactly; an in-place weight update is seen; an x of other strides takes the
    general path; a pooled call that needs a gradient is refused by name after its signature ran without one."""
    from triton_kernels import conv1d_eager, runtime

    x, w, b = torch.randn(2, 11, 6, device=DEVICE), torch.randn(9, 6, 3, device=DEVICE), torch.randn(9, device=DEVICE)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    assert_fast_path_repeats(lambda: conv1d.conv1d(*leaves, "relu"), leaves, torch.randn(2, 9, 9, device=DEVICE),
                             ("dx", "dw", "dbias"))
    assert conv1d_eager._key(x, w, b, "relu", 1, runtime.torch_conv_precision(x)) in conv1d_eager._FAST
    # the same signature with only the bias's gradient wanted: the fast path fixes launches per set of gradients
    b_again, dy = b.clone().requires_grad_(), torch.randn(2, 9, 9, device=DEVICE)
    y64 = ref_conv(x.double(), w.double(), b.double(), "relu")
    for _ in range(2):
        y = conv1d.conv1d(x, w, b_again, "relu")
        assert type(y.grad_fn).__name__ == "_NodeBackward"
        assert_close(torch.autograd.grad(y, b_again, dy)[0], (dy.double() * (y64 > 0)).sum((0, 1)), torch.float32)
    # no bias, no activation, the weight's gradient alone: no act pass, no dx
    w_only = w.clone().requires_grad_()
    assert_fast_path_repeats(lambda: conv1d.conv1d(x, w_only), [w_only], torch.randn(2, 9, 9, device=DEVICE), ("dw",))
    # the bias's gradient alone (the ReLU's column sums, no dz stored), and x's alone (new signatures: other lengths)
    b_only, x_only = b.clone().requires_grad_(), torch.randn(2, 13, 6, device=DEVICE).requires_grad_()
    assert_fast_path_repeats(lambda: conv1d.conv1d(x[:, :10], w, b_only, "relu"), [b_only],
                             torch.randn(2, 8, 9, device=DEVICE), ("dbias",))
    assert_fast_path_repeats(lambda: conv1d.conv1d(x_only, w, b, "relu"), [x_only],
                             torch.randn(2, 11, 9, device=DEVICE), ("dx",))
    with torch.no_grad():
        leaves[1].mul_(-1)
        y = conv1d.conv1d(*leaves, "relu")
    assert_close(y, ref_conv(x.double(), -w.double(), b.double(), "relu"), torch.float32)
    strided = leaves[0].detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    assert type(conv1d.conv1d(strided, *leaves[1:], "relu").grad_fn).__name__ != "_NodeBackward"
    with torch.no_grad():
        conv1d.conv1d(*leaves, "relu", pool=3)
    with pytest.raises(ValueError, match="inference epilogue"):
        conv1d.conv1d(*leaves, "relu", pool=3)


def test_default_precision_is_torchs_conv_precision(monkeypatch):
    """precision=None (conv1d's default) runs what torch's own conv1d runs, read at each call: "tf32" for fp32
    while torch lets cuDNN use TF32 for convolutions (its default), "ieee" after
    torch.backends.cudnn.allow_tf32 = False; the backward's kernels run the forward's precision."""
    monkeypatch.setattr(conv1d, "_PLANS", {})
    x = torch.randn(2, 20, 8, device=DEVICE, requires_grad=True)
    w, b = torch.randn(12, 8, 3, device=DEVICE, requires_grad=True), torch.randn(12, device=DEVICE)
    for allow, want in ((True, "tf32"), (False, "ieee")):
        with cudnn_tf32(allow):
            y = conv1d.conv1d(x, w, b, "relu")
            y.sum().backward()
            assert_close(y, ref_conv(x.double(), w.double(), b.double(), "relu"), torch.float32,
                         tf32=allow and x.is_cuda)
        assert {key[0].precision for key in conv1d._PLANS} == {want}, allow  # forward and dx
        conv1d._PLANS.clear()
    with pytest.raises(ValueError, match="precision must be"):
        conv1d.conv1d(x, w, precision="fp32")


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
def test_packed_weight_layout(precision):
    """pack_weight keeps shape and values, lays the weight out as (k, C_in, C_out) (an fp32 weight at tf32: as
    (C_out, k, C_in), input channels innermost; 16-bit: the first at any precision), and its gradient reaches
    the original weight."""
    w = torch.randn(6, 4, 3, device=DEVICE, requires_grad=True)
    p = conv1d.pack_weight(w, precision)
    layout = (0, 2, 1) if precision == "tf32" else (2, 1, 0)
    assert p.shape == w.shape and torch.equal(p, w) and p.permute(*layout).is_contiguous()
    assert conv1d.pack_weight(w.detach().half(), precision).permute(2, 1, 0).is_contiguous()
    x = torch.randn(2, 8, 4, device=DEVICE)
    y = conv1d.conv1d(x, p, precision=precision)
    assert_close(y, ref_conv(x.double(), w.detach().double()), torch.float32, tf32=precision == "tf32")
    y.sum().backward()
    ref = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), w.shape, torch.ones(2, 6, 6, dtype=torch.float64))
    assert_close(w.grad, ref, torch.float32, tf32=precision == "tf32")


# ------------------------------------------------------------------------------------------ view matrix
VIEW_ARGS = {"x": Arg((2, 7, 4), broadcast=(0,)), "weight": Arg((5, 4, 3)), "bias": Arg((5,))}


def view_case(arg: str, layout: str, dtype_name: str, device: str = DEVICE) -> None:
    """One (argument, layout) case of the matrix: output and every base's gradient vs float64."""
    case = next(c for c in view_cases(VIEW_ARGS) if (c.arg, c.layout) == (arg, layout))
    check_case(case, VIEW_ARGS, lambda x, weight, bias: conv1d.conv1d(x, weight, bias, "relu"),
               lambda x, weight, bias: ref_conv(x, weight, bias, "relu"), dtype=DTYPE_NAMES[dtype_name],
               device=device)


@pytest.mark.parametrize("case", view_cases(VIEW_ARGS), ids=str)
def test_views(case):
    view_case(case.arg, case.layout, "float32")


# ------------------------------------------------------------------------------------------ first layer
def _indices(B, L, C, device=DEVICE, dtype=torch.uint8):
    """Character indices with some out-of-alphabet entries (C and C + 1: 'no character')."""
    return torch.randint(0, C + 2, (B, L), device=device).to(dtype)


@pytest.mark.parametrize("k,index_dtype", [(7, torch.uint8), (3, torch.int64)])
def test_gather_matches_dense_one_hot_conv(k, index_dtype):
    """The gather-sum equals the dense conv over the one-hot (both Triton) and float64; dw and dbias too."""
    B, L, C, N = 2, 23, 11, 20
    idx = _indices(B, L, C, dtype=index_dtype)
    if index_dtype == torch.int64:  # outside int32 too: no character, not the index modulo 2**32
        idx[0, 0], idx[0, 5], idx[1, 2] = 2**32 + 1, 2**33 + 3, -(2**40)
    w = torch.randn(N, C, k, device=DEVICE)
    b = torch.randn(N, device=DEVICE)
    ws, bs = w.clone().requires_grad_(), b.clone().requires_grad_()
    y = conv1d_gather.conv1d_gather(idx, ws, bs, "relu")
    with cudnn_tf32(False):  # exact fp32 on the GPU too (conv1d follows torch's conv precision)
        dense = conv1d.conv1d(one_hot_cl(idx, C, torch.float32), w, b, "relu")
    assert_close(y, dense.double(), torch.float32, name="gather vs dense")
    w64, b64 = w.double().requires_grad_(), b.double().requires_grad_()
    ref = ref_conv(one_hot_cl(idx, C, torch.float64), w64, b64, "relu")
    assert_close(y, ref, torch.float32)
    g = torch.randn(ref.shape, dtype=torch.float64, device=DEVICE)
    y.backward(g.float())
    ref.backward(g)
    assert_close(ws.grad, w64.grad, torch.float32, name="dw")
    assert_close(bs.grad, b64.grad, torch.float32, name="dbias")


def test_gather_dtypes_and_small_tiles():
    """fp16 weights, and bf16 on the GPU (the interpreter's bf16 stores truncate: refused there); forced tiles."""
    idx = _indices(3, 30, 9)
    w = torch.randn(19, 9, 7, device=DEVICE)
    b = torch.randn(19, device=DEVICE)
    ref = ref_conv(one_hot_cl(idx, 9, torch.float64), w.double(), b.double())
    for dtype in (torch.float16, torch.bfloat16) if DEVICE != "cpu" else (torch.float16,):
        with torch.no_grad():
            y = conv1d_gather.conv1d_gather(idx, w.to(dtype), b.to(dtype))
        assert y.dtype == dtype
        assert_close(y, ref, dtype)
    assert_close(conv1d_gather.gather_conv_forward(idx, w, b, config=SMALL_GATHER_TILES), ref, torch.float32)


def _ln_ref(z, g, h, pool, eps=1e-5):
    """relu(max_pool1d(layer_norm(z, [C, L]))) on channels-first float64 z (B, C, L) -> channels-first."""
    return functional.max_pool1d(functional.relu(functional.layer_norm(z, z.shape[1:], g, h, eps)), pool, pool)


@pytest.mark.parametrize("pool,affine,offset,scale", [(3, True, 3.0, 1.0), (2, False, 3.0, 1.0),
                                                      (3, True, 1e3, 1e-2)])
def test_gather_ln_relu_pool(pool, affine, offset, scale):
    """The fused first block: statistics from the moment tables, then the gather normalise-pool pass;
    forced small tiles give several partials per sample (merged with Chan's formula). offset 1e3 with
    weights of 1e-2: a mean 1e5 times the spread; the fp32 conv output itself then carries 1e-3 relative
    error (torch's fp32 conv + layer_norm too), so that case is held to twice the larger of torch's own error
    and the error of rounding the conv output to fp32 (half an ulp of its largest value over its spread)."""
    _check_gather_ln_relu_pool(pool, affine, offset, scale)


def test_gather_ln_relu_pool_without_bias():
    """No conv bias: nothing is added to the gathered values (the kernel reads a zero)."""
    _check_gather_ln_relu_pool(3, True, 0.0, 1.0, has_bias=False)


def _check_gather_ln_relu_pool(pool, affine, offset, scale, has_bias=True):
    B, L, C, N, k = 2, 40, 10, 24, 7
    idx = _indices(B, L, C)
    idx[0, 3] = C + 5  # out of range: "no character"
    w = torch.randn(N, C, k, device=DEVICE) * scale
    b = torch.randn(N, device=DEVICE) * scale + offset if has_bias else None  # a mean far from 0
    L_out = L - k + 1
    g = torch.randn(N, L_out, device=DEVICE) if affine else None
    h = torch.randn(N, L_out, device=DEVICE) if affine else None
    z = functional.conv1d(one_hot_cl(idx, C, torch.float64).transpose(1, 2), w.double(),
                          b.double() if has_bias else None)
    ref = _ln_ref(z, g.double() if affine else None, h.double() if affine else None, pool).transpose(1, 2)
    with cudnn_tf32(False):  # torch's exact fp32 error on the GPU too, not TF32's
        z32 = functional.conv1d(one_hot_cl(idx, C, torch.float32).transpose(1, 2), w, b)
    torch_err = rel_err(_ln_ref(z32, g, h, pool).transpose(1, 2), ref)
    rounding = (2.0**-24 * z.abs().amax(dim=(1, 2)) / z.std(dim=(1, 2))).max().item()
    scale = max(1.0, 2 * max(torch_err, rounding) / tolerance(torch.float32))
    with torch.no_grad():
        y = conv1d_gather.conv1d_gather_ln_relu_pool(idx, w, b, g, h, pool=pool)
    assert_close(y, ref, torch.float32, scale=scale)
    y2 = conv1d_gather.ln_relu_pool_forward(idx, w, b, g, h, 1e-5, pool, False, config=SMALL_GATHER_TILES,
                                            stats_config=Config({"BLOCK_M": 8}, 1, 1))
    assert_close(y2, ref, torch.float32, name="small tiles", scale=scale)
    with torch.no_grad():
        y3 = conv1d_gather.conv1d_gather_ln_relu_pool(idx, w, b, g, h, pool=pool,
                                                      moments=conv1d_gather.gather_moment_tables(w, b))
    assert_close(y3, ref, torch.float32, name="moments given", scale=scale)


def test_gather_moment_tables_give_the_conv_statistics():
    """mean and M2 per position from the tables equal the gather conv's own, in float64."""
    C, N, k = 6, 20, 3
    w, b = torch.randn(N, C, k, dtype=torch.float64), torch.randn(N, dtype=torch.float64) + 2.0
    idx = torch.tensor([[0, 5, 2, 6, 1]])  # 6: no character
    z = functional.conv1d(one_hot_cl(idx, C, torch.float64).transpose(1, 2), w, b)[0]  # (N, 3)
    mu, cross, gram = (t.double() for t in conv1d_gather.gather_moment_tables(w, b))
    for l in range(z.shape[1]):
        rows = [t * (C + 1) + min(int(idx[0, l + t]), C) for t in range(k)]
        mean = sum(mu[r] for r in rows)
        m2 = sum(cross[r] for r in rows) + sum(gram[r, s] for r in rows for s in rows)
        assert torch.allclose(mean, z[:, l].mean(), rtol=1e-6), l
        assert torch.allclose(m2, (z[:, l] - z[:, l].mean()).square().sum(), rtol=1e-6), l


@pytest.mark.parametrize("channels_first", [False, True])
def test_ln_relu_pool_channels_last(channels_first):
    """LayerNorm([C, L]) -> ReLU -> MaxPool1d(3) on a channels-last (and a strided) x; output either layout."""
    base = torch.randn(3, 17, 45, device=DEVICE) * 2 + 1
    x = base[:, :, 5:38]  # (3, 17, 33): channel stride 1, row stride 45
    g, h = torch.randn(33, 17, device=DEVICE), torch.randn(33, 17, device=DEVICE)
    with torch.no_grad():
        y = conv1d_gather.layer_norm_relu_maxpool_cl(x, g.t().contiguous().t(), h, channels_first=channels_first)
    ref = _ln_ref(x.double().transpose(1, 2), g.double(), h.double(), 3)
    assert_close(y, ref if channels_first else ref.transpose(1, 2), torch.float32)
    assert y.is_contiguous()


def test_nan_propagates_like_torch():
    x = torch.randn(2, 12, 4, device=DEVICE)
    x[1, 5, 2] = float("nan")
    w, b = torch.randn(6, 4, 3, device=DEVICE), torch.randn(6, device=DEVICE)
    with torch.no_grad():
        for pool in (1, 3):
            y = conv1d.conv1d(x, w, b, "relu", pool=pool)
            r = ref_conv(x, w, b, "relu", pool)
            assert torch.equal(torch.isnan(y), torch.isnan(r)), pool
        y = conv1d_gather.layer_norm_relu_maxpool_cl(x, None, None)
        assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any()  # one NaN poisons its sample's statistics


def test_outputs_fully_written():
    """Every output element is written: a launch into a NaN-poisoned buffer leaves no NaN."""
    x = torch.randn(2, 19, 5, device=DEVICE)
    w, b = torch.randn(9, 5, 3, device=DEVICE), torch.randn(9, device=DEVICE)
    out = poison_(torch.empty(2, 17, 9, device=DEVICE))
    out.copy_(conv1d.conv1d_forward(x, w, b, config=SMALL_TILES))
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("bad,match", [
    (lambda x, w, i: conv1d.conv1d(x[0], w), "x must have 3 dims"),
    (lambda x, w, i: conv1d.conv1d(x, w[:, :3]), "C_in must equal"),
    (lambda x, w, i: conv1d.conv1d(x, w.half()), "weight has dtype"),
    (lambda x, w, i: conv1d.conv1d(x, w, torch.ones(3)), "bias has 3 elements"),
    (lambda x, w, i: conv1d.conv1d(x, w, activation="gelu"), "activation must be"),
    (lambda x, w, i: conv1d.conv1d(x, w, pool=0), "pool must be"),
    (lambda x, w, i: conv1d.conv1d(x, w, precision="fp8"), "precision must be"),
    (lambda x, w, i: conv1d.conv1d(x[:, :2], w), "output would be empty"),
    (lambda x, w, i: conv1d.conv1d(x, w[:0]), "at least one output and one input channel"),
    (lambda x, w, i: conv1d.conv1d(x[..., :0], w[:, :0]), "at least one output and one input channel"),
    (lambda x, w, i: conv1d.conv1d(x.requires_grad_(), w, pool=3), "inference epilogue"),
    (lambda x, w, i: conv1d.conv1d(x.bfloat16(), w.bfloat16()), "interpreter cannot compute"),
    (lambda x, w, i: conv1d.conv1d(x, w.to("meta")), "weight is on meta"),
    (lambda x, w, i: conv1d_gather.conv1d_gather(i.float(), w), "indices has dtype"),
    (lambda x, w, i: conv1d_gather.conv1d_gather(i[:, :2], w), "indices has length 2"),
    (lambda x, w, i: conv1d_gather.conv1d_gather(i, w.bfloat16().requires_grad_()), "interpreter cannot compute"),
    (lambda x, w, i: conv1d_gather.conv1d_gather(i, w.bfloat16()), "interpreter cannot compute"),
    (lambda x, w, i: conv1d_gather.conv1d_gather_ln_relu_pool(i, w.bfloat16(), None, None, None),
     "interpreter cannot compute"),
    (lambda x, w, i: conv1d_gather.layer_norm_relu_maxpool_cl(x.bfloat16(), None, None), "interpreter cannot compute"),
    (lambda x, w, i: conv1d_gather.conv1d_gather_ln_relu_pool(i, w, None, torch.ones(5, 3), None),
     "ln_weight has shape"),
    (lambda x, w, i: conv1d_gather.conv1d_gather_ln_relu_pool(i, w.requires_grad_(), None, None, None),
     "inference kernel"),
    (lambda x, w, i: conv1d_gather.conv1d_gather_ln_relu_pool(i, w, None, None, None, moments=(w, w, w)),
     "moments mu has shape"),
    (lambda x, w, i: conv1d_gather.layer_norm_relu_maxpool_cl(x, None, None, pool=9), "pooled output would be empty"),
])
def test_bad_input_raises(bad, match):
    if "meta" in match and DEVICE != "cpu":
        pytest.skip("the meta check runs on any device; the interpreter-dtype check only on the CPU")
    if "interpreter" in match and DEVICE != "cpu":
        pytest.skip("bf16 is computed on the GPU")
    x = torch.randn(2, 8, 4, device=DEVICE)
    w = torch.randn(5, 4, 3, device=DEVICE)
    i = _indices(2, 8, 4)
    with pytest.raises(ValueError, match=match):
        bad(x, w, i)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", view_cases(VIEW_ARGS), ids=str)
def test_gpu_views(case, dtype_name, isolated):
    isolated("tests.test_conv1d:view_case", case.arg, case.layout, dtype_name, "cuda")


def gpu_char_cnn_layers(dtype_name: str) -> None:
    """Char-CNN's conv shapes at batch 32 (k = 7 and 3, pool 3, the gather block and block 6) vs float64."""
    dtype = DTYPE_NAMES[dtype_name]
    _check_conv(32, 336, 256, 256, 7, "relu", dtype, device="cuda")
    _check_conv(16, 110, 256, 256, 3, "relu", dtype, device="cuda")  # precision="ieee": exact fp32
    x = torch.randn(32, 336, 256, device="cuda", dtype=dtype)
    w = conv1d.pack_weight(torch.randn(256, 256, 7, device="cuda", dtype=dtype) * 0.02)
    b = torch.randn(256, device="cuda", dtype=dtype)
    with torch.no_grad():
        y = conv1d.conv1d(x, w, b, "relu", pool=3, precision="ieee")
    assert_close(y, ref_conv(x.double(), w.double(), b.double(), "relu", 3), dtype)
    idx = _indices(32, 1014, 70, device="cuda")
    w1 = conv1d.pack_weight(torch.randn(256, 70, 7, device="cuda", dtype=dtype))
    b1 = torch.randn(256, device="cuda", dtype=dtype)
    g, h = torch.randn(256, 1008, device="cuda", dtype=dtype), torch.randn(256, 1008, device="cuda", dtype=dtype)
    z = functional.conv1d(one_hot_cl(idx, 70, torch.float64).transpose(1, 2), w1.double(), b1.double())
    with torch.no_grad():
        y1 = conv1d_gather.conv1d_gather_ln_relu_pool(idx, w1, b1, g, h)
        z1 = conv1d_gather.conv1d_gather(idx, w1, b1)
    assert_close(z1, z.transpose(1, 2), dtype, name="gather")
    assert_close(y1, _ln_ref(z, g.double(), h.double(), 3).transpose(1, 2), dtype, name="fused block 1")
    x6 = torch.randn(64, 102, 256, device="cuda", dtype=dtype)
    g6, h6 = torch.randn(256, 102, device="cuda", dtype=dtype), torch.randn(256, 102, device="cuda", dtype=dtype)
    with torch.no_grad():
        y6 = conv1d_gather.layer_norm_relu_maxpool_cl(x6, g6, h6, channels_first=True)
    assert_close(y6, _ln_ref(x6.double().transpose(1, 2), g6.double(), h6.double(), 3), dtype, name="block 6")
    ws = w1.detach().requires_grad_()
    conv1d_gather.conv1d_gather(idx, ws, b1).float().sum().backward()
    ref_dw = torch.nn.grad.conv1d_weight(one_hot_cl(idx, 70, torch.float64).transpose(1, 2), ws.shape,
                                         torch.ones(32, 256, 1008, dtype=torch.float64, device="cuda"))
    assert_close(ws.grad, ref_dw, dtype, name="gather dw")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16", "float32"])
def test_gpu_char_cnn_layers(dtype_name, isolated):
    isolated("tests.test_conv1d:gpu_char_cnn_layers", dtype_name)


def gpu_weight_grad_paths() -> None:
    """The TMA weight-gradient kernel (what "auto" takes for 16-bit operands on Hopper) and the pointer one against
    float64 in bf16 and fp16: lengths that are no multiple of a block, channel counts off the tiles, one
    Char-CNN layer."""
    for B, L, C, N, k, dtype in ((5, 117, 72, 200, 7, torch.bfloat16), (3, 40, 256, 256, 3, torch.float16),
                                 (8, 336, 256, 256, 7, torch.bfloat16)):
        x = torch.randn(B, L, C, device="cuda", dtype=dtype)
        dz = torch.randn(B, L - k + 1, N, device="cuda", dtype=dtype)
        ref = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), (N, C, k), dz.double().transpose(1, 2))
        for path in ("tma", "pointer", "auto"):
            dw = conv1d.conv1d_weight_grad(x, dz, k, C, path=path)
            assert_close(dw.permute(2, 1, 0), ref, dtype, name=f"dw {path} {B}x{L}x{C}->{N} k{k}")


@pytest.mark.gpu
def test_gpu_weight_grad_paths(isolated):
    isolated("tests.test_conv1d:gpu_weight_grad_paths")


def gpu_fast_path_repeats() -> None:
    """The eager fast path's fixed launches on the GPU give the general path's output and gradients bit for bit:
    a Char-CNN layer in bf16 (packed weight: the TMA weight gradient), fp32 at tf32 with a weight the forward and
    dx read through copies; then an x 2 bytes off alignment (the same signature) takes the pointer weight
    gradient and stays right against float64."""
    def leaves_of(*ts):
        return [t.clone().requires_grad_() for t in ts]

    x = torch.randn(8, 110, 256, device="cuda", dtype=torch.bfloat16)
    w = conv1d.pack_weight(torch.randn(256, 256, 3, device="cuda", dtype=torch.bfloat16) * 0.05)
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    leaves = [x.requires_grad_(), w.requires_grad_(), b.requires_grad_()]
    dy = torch.randn(8, 108, 256, device="cuda", dtype=torch.bfloat16)
    assert_fast_path_repeats(lambda: conv1d.conv1d(*leaves, "relu"), leaves, dy, ("dx", "dw", "dbias"))
    odd = torch.empty(x.numel() + 1, device="cuda", dtype=torch.bfloat16)[1:].view(x.shape)
    odd.copy_(x.detach())
    odd.requires_grad_()
    y = conv1d.conv1d(odd, w, b, "relu")
    assert type(y.grad_fn).__name__ == "_NodeBackward"
    dx, dw, db = torch.autograd.grad(y, (odd, w, b), dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = ref_conv(x64, w64, b64, "relu")
    for name, got, want in zip(("dx", "dw", "dbias"), (dx, dw, db),
                               torch.autograd.grad(ref, (x64, w64, b64), dy.double())):
        assert_close(got, want, torch.bfloat16, name=name)
    f32 = leaves_of(torch.randn(4, 60, 64, device="cuda"), torch.randn(96, 64, 7, device="cuda") * 0.05,
                    torch.randn(96, device="cuda"))
    assert_fast_path_repeats(lambda: conv1d.conv1d(*f32, "relu", precision="tf32"), f32,
                             torch.randn(4, 54, 96, device="cuda"), ("dx", "dw", "dbias"))


@pytest.mark.gpu
def test_gpu_fast_path_repeats(isolated):
    isolated("tests.test_conv1d:gpu_fast_path_repeats")


def gpu_tf32_and_compile() -> None:
    _check_conv(8, 100, 64, 96, 7, "relu", torch.float32, device="cuda", precision="tf32")
    x = torch.randn(4, 50, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(48, 32, 3, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(48, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, b: conv1d.conv1d(x, w, b, "relu").float().square().sum(), fullgraph=True)
    fn(x, w, b).backward()
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    conv1d.conv1d(x, w, b, "relu").float().square().sum().backward()
    for g1, t in zip(grads, (x, w, b)):
        assert rel_err(g1, t.grad) < 1e-2


@pytest.mark.gpu
def test_gpu_tf32_and_compile(isolated):
    isolated("tests.test_conv1d:gpu_tf32_and_compile")


def gpu_default_precision_follows_torch() -> None:
    """On the GPU: precision=None gives the tf32 result while cuDNN may use TF32 for convolutions and the ieee
    one after allow_tf32 = False, as an eager call and under torch.compile (followed after compiling)."""
    x = torch.randn(8, 100, 64, device="cuda")
    w = torch.randn(96, 64, 7, device="cuda") / 21
    with torch.no_grad():
        by_precision = {p: conv1d.conv1d(x, w, None, "relu", precision=p) for p in ("ieee", "tf32")}
        assert not torch.equal(by_precision["ieee"], by_precision["tf32"])
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, w: conv1d.conv1d(x, w, None, "relu"), fullgraph=True)
        for allow, precision in ((True, "tf32"), (False, "ieee"), (True, "tf32")):
            with cudnn_tf32(allow):
                assert torch.equal(conv1d.conv1d(x, w, None, "relu"), by_precision[precision]), allow
                assert torch.equal(compiled(x, w), by_precision[precision]), allow


@pytest.mark.gpu
def test_gpu_default_precision_follows_torch(isolated):
    isolated("tests.test_conv1d:gpu_default_precision_follows_torch")


def gpu_autotune_picks_a_config() -> None:
    import os

    os.environ["TRITON_PLAYGROUND_AUTOTUNE"] = "1"
    try:
        x = torch.randn(64, 110, 256, device="cuda", dtype=torch.bfloat16)
        w = conv1d.pack_weight(torch.randn(256, 256, 3, device="cuda", dtype=torch.bfloat16) * 0.03)
        with torch.no_grad():
            y = conv1d.conv1d(x, w, None, "relu")
        assert_close(y, ref_conv(x.double(), w.double(), None, "relu"), torch.bfloat16)
        assert any(what in ("tuned", "hit") for _, what in conv1d._conv_tuner.events)
    finally:
        os.environ["TRITON_PLAYGROUND_AUTOTUNE"] = "0"


@pytest.mark.gpu
def test_gpu_autotune(isolated):
    isolated("tests.test_conv1d:gpu_autotune_picks_a_config")


def test_op_suite_cases_run_through_the_harness():
    """bench/cases/conv1d.py's interpreter cases: every backend checked against float64 and timed (status ok)."""
    from bench.cases import conv1d as cases
    from bench.harness import RunConfig, run_cases

    built = cases.cases(tiny=True)
    assert all(c.flops > 0 and c.bytes > 0 for c in built)
    rows = run_cases(built, RunConfig(backends=["eager", "triton"], rounds=1, rep=1), progress=False)
    timed = [r for r in rows if r["metric"] == "time_ms"]
    assert len(timed) == 2 * len(built) and all(r["status"] == "ok" for r in timed), \
        [(r["case"], r["backend"], r["status"], r["note"]) for r in timed if r["status"] != "ok"]


def test_max_pool_channels_last():
    x = torch.randn(3, 16, 9, device=DEVICE)[:, 1:, :]  # length 15, a strided view
    with torch.no_grad():
        y = conv1d.max_pool1d_cl(x, 3)
    assert torch.equal(y, functional.max_pool1d(x.transpose(1, 2), 3, 3).transpose(1, 2))
    with pytest.raises(ValueError, match="pool must be"):
        conv1d.max_pool1d_cl(x, 0)
