"""conv2d (NHWC implicit GEMM, fused bias / residual / ReLU epilogue, cuDNN backward) against float64:
kernel 1 and 3, stride 1 and 2, padding 0 / 1 / 2, odd sizes and channel counts, channels_last and NCHW
inputs, every gradient (x, weight, bias, residual), forced small tiles, a poisoned output, the view/stride
matrix, the packed-weight cache, the batch-norm statistics variant, the ResNet hook, the op-suite cases and
bad input (CPU interpreter); on the GPU bf16 at every ResNet-18 CIFAR shape, the views in bf16 / fp16,
tf32, the tuner and torch.compile(fullgraph=True)."""
import gc

import pytest
import torch
from torch.nn import functional

from triton_kernels import conv2d, runtime
from triton_kernels.runtime import Config
from triton_kernels.testing import assert_close, assert_fast_path_repeats, cudnn_tf32, poison_, rel_err, tolerance

from .conftest import DEVICE
from .view_matrix import Arg, check_case, view_cases

SMALL_TILES = Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}, 4, 1)
DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CL = torch.channels_last


def ref_conv(x, weight, bias=None, stride=1, padding=0, residual=None, activation="none"):
    """The float64-able torch reference (residual added before the activation)."""
    z = functional.conv2d(x, weight, bias, stride, padding)
    if residual is not None:
        z = z + residual
    return functional.relu(z) if activation == "relu" else z


def _inputs(B, C, H, W, N, k, stride, pad, bias, residual, dtype, layout, device=DEVICE):
    x = torch.randn(B, C, H, W, device=device).to(dtype)
    x = x.contiguous(memory_format=CL) if layout == "channels_last" else x.contiguous()
    w = (torch.randn(N, C, k, k, device=device) / (C * k * k) ** 0.5).to(dtype)
    b = torch.randn(N, device=device).to(dtype) if bias else None
    H_out, W_out = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    r = torch.randn(B, N, H_out, W_out, device=device).to(dtype) if residual else None
    if r is not None and layout == "channels_last":
        r = r.contiguous(memory_format=CL)
    return x, w, b, r


def _check(B, C, H, W, N, k, stride, pad, bias, residual, activation, dtype, layout="channels_last",
           device=DEVICE, precision="ieee", tf32=False, path="auto"):
    """Forward and every gradient against float64 (the gradient through OUR output's ReLU mask: where a
    pre-activation is within rounding of 0 the two masks may differ; the masked product is what counts)."""
    inputs = _inputs(B, C, H, W, N, k, stride, pad, bias, residual, dtype, layout, device)
    leaves = [t.clone().requires_grad_() if t is not None else None for t in inputs]
    y = conv2d.conv2d(leaves[0], leaves[1], leaves[2], stride, pad, residual=leaves[3], activation=activation,
                      precision=precision, path=path)
    refs = [t.detach().double().cpu().requires_grad_() if t is not None else None for t in inputs]
    r = ref_conv(refs[0], refs[1], refs[2], stride, pad, refs[3], activation)
    assert y.shape == r.shape and y.dtype == dtype and y.is_contiguous(memory_format=CL)
    assert_close(y, r, dtype, tf32=tf32, name="y")
    if activation == "relu":
        r = ref_conv(refs[0], refs[1], refs[2], stride, pad, refs[3]) * (y.detach().cpu().double() > 0)
    g = torch.randn(r.shape, dtype=torch.float64)
    y.backward(g.to(device, dtype))
    r.backward(g)
    for name, t, ref in zip(("dx", "dweight", "dbias", "dresidual"), leaves, refs):
        if t is not None:
            assert t.grad.dtype == t.dtype and t.grad.shape == t.shape, name
            assert_close(t.grad, ref.grad, dtype, tf32=tf32, name=name)


@pytest.mark.parametrize("B,C,H,W,N,k,stride,pad,bias,residual,activation,dtype,layout", [
    (2, 5, 7, 9, 6, 3, 1, 1, True, True, "relu", torch.float32, "channels_last"),
    (2, 5, 7, 9, 6, 3, 2, 1, False, False, "none", torch.float32, "nchw"),
    (1, 3, 6, 5, 4, 1, 2, 0, True, False, "relu", torch.float16, "channels_last"),
    (2, 4, 5, 5, 7, 3, 1, 2, False, True, "relu", torch.float16, "nchw"),
    (2, 6, 9, 7, 10, 3, 2, 0, True, True, "none", torch.float32, "channels_last"),
    (1, 37, 5, 6, 33, 1, 1, 0, True, True, "relu", torch.float32, "channels_last"),
    (2, 3, 8, 8, 16, 3, 1, 1, False, False, "relu", torch.float16, "channels_last"),
    (2, 7, 6, 6, 5, 1, 2, 1, True, False, "none", torch.float32, "nchw"),
])
@pytest.mark.parametrize("path", ["auto", "tiled"])
def test_forward_backward(B, C, H, W, N, k, stride, pad, bias, residual, activation, dtype, layout, path):
    """"auto" runs the flat-K kernels wherever C_in < 16 (all but the 37-channel case), "tiled" never."""
    assert conv2d.uses_flat(C, k, k, path) == (path == "auto" and C < 16)
    _check(B, C, H, W, N, k, stride, pad, bias, residual, activation, dtype, layout, path=path)


@pytest.mark.parametrize("B,C,H,W,N,k,stride,bias,activation,dtype", [
    (2, 32, 4, 4, 48, 3, 1, True, "relu", torch.float32),   # one tile per sample, a ragged channel block
    (3, 16, 8, 4, 32, 3, 1, False, "none", torch.float16),  # two tiles per sample
    (3, 16, 2, 4, 16, 3, 1, True, "none", torch.float32),   # two samples per tile, a ragged last tile
    (2, 16, 2, 8, 20, 5, 1, False, "relu", torch.float32),  # a 5 x 5 kernel, padding 2 on a 2-row map
    (1, 16, 4, 16, 64, 1, 1, True, "relu", torch.float32),  # 1 x 1
    (2, 32, 8, 8, 48, 3, 2, True, "relu", torch.float32),   # stride 2: a 4 x 4 output, one tile per sample
    (3, 16, 4, 16, 32, 3, 2, False, "none", torch.float16),  # stride 2: a 2 x 8 output
    (2, 16, 8, 8, 20, 5, 2, False, "relu", torch.float32),  # stride 2, 5 x 5, padding 2
    (1, 16, 8, 8, 64, 1, 2, True, "none", torch.float32),   # 1 x 1 stride 2 (a ResNet shortcut)
])
def test_transposed_kernel(B, C, H, W, N, k, stride, bias, activation, dtype):
    """The transposed kernel (TMA boxes of whole output rows, the stride's phases as dimensions of their own,
    zero-filled out of the map: the padding) forward and every gradient against float64 (its path forced:
    these maps are under the pixels "auto" gives it)."""
    x = torch.randn(B, C, H, W, device=DEVICE).to(dtype).contiguous(memory_format=CL)
    geometry = (stride, stride), (k // 2, k // 2)
    assert conv2d.kernel_kind(x, k, k, N, *geometry, "ieee", "transposed") == "transposed"
    assert conv2d.kernel_kind(x, k, k, N, *geometry, "ieee") == "tiled"
    _check(B, C, H, W, N, k, stride, k // 2, bias, False, activation, dtype, path="transposed")


@pytest.mark.parametrize("k,stride,bias,activation,dtype", [
    (3, 1, True, "relu", torch.float32), (3, 2, False, "relu", torch.float16), (1, 2, True, "none", torch.float32),
])
def test_transposed_kernel_residual(k, stride, bias, activation, dtype):
    """The transposed kernel's residual epilogue, act(conv + bias + residual) with a channels_last residual:
    forward and every gradient (the residual's included) against float64; a residual of another layout is
    refused by name on the forced path, and "auto" then runs the tiled kernel."""
    _check(2, 16, 8, 8, 24, k, stride, k // 2, bias, True, activation, dtype, path="transposed")
    x, w, _, r = _inputs(2, 16, 8, 8, 24, k, stride, k // 2, False, True, dtype, "channels_last")
    nchw = r.contiguous()
    with pytest.raises(ValueError, match="cannot run this call: it reads the residual as a dense channels_last"):
        conv2d.conv2d(x, w, None, stride, k // 2, residual=nchw, path="transposed")
    with pytest.raises(ValueError, match="residual must be a dense channels_last tensor"):
        conv2d.conv2d_transposed_forward(x, conv2d.pack_weight(w, transposed=True), residual=nchw, stride=stride)
    geometry = (stride, stride), (k // 2, k // 2)
    assert conv2d.kernel_kind(x, k, k, 24, *geometry, "ieee", "transposed", residual=r) == "transposed"


@pytest.mark.parametrize("H,W,k,stride,pad", [(8, 8, 3, 2, 0), (7, 8, 3, 2, 1), (8, 8, 3, 3, 1), (8, 8, 2, 1, 1)])
def test_transposed_kernel_refuses_other_geometries(H, W, k, stride, pad):
    """Stride 1 or 2 only, on a map the stride divides, with the padding that gives an (H / stride) x
    (W / stride) output: anything else is refused by name before a launch, and "auto" runs the tiled kernel."""
    x = torch.randn(1, 16, H, W, device=DEVICE).contiguous(memory_format=CL)
    w = torch.randn(16, 16, k, k, device=DEVICE)
    with pytest.raises(ValueError, match="path='transposed' cannot run this call: it needs stride 1 or 2"):
        conv2d.conv2d(x, w, None, stride, pad, path="transposed")
    with pytest.raises(ValueError, match="it needs stride 1 or 2"):
        conv2d.conv2d_transposed_forward(x, conv2d.pack_weight(w, transposed=True), stride=stride, padding=pad)
    assert conv2d.kernel_kind(x, k, k, 16, (stride, stride), (pad, pad), "ieee") == "tiled"


@pytest.mark.parametrize("C,H,N,bias,activation", [(64, 8, 64, True, "relu"), (128, 4, 96, False, "none")])
def test_transposed_kernel_at_tf32(C, H, N, bias, activation):
    """fp32 at tf32 through the transposed kernel: forward and every gradient against float64 within TF32's
    tolerance; its plan is tuned at tf32."""
    plans = set(conv2d._PLANS)
    _check(2, C, H, H, N, 3, 1, 1, bias, False, activation, torch.float32, precision="tf32", tf32=True,
           path="transposed")
    new = [k for k in set(conv2d._PLANS) - plans]
    assert [(k[3], k[0].precision, k[0].c) for k in new] == [("transposed", "tf32", C)]


def test_auto_picks_the_transposed_kernel_where_it_wins():
    """"auto": the transposed kernel for 16-bit or tf32 inputs of >= 64 channels on >= 8192 output pixels (at
    stride 2 in 16-bit also >= 2**32 multiply-adds), and for 16-bit inputs of >= 512 channels on maps of <= 16
    pixels at stride 1 (ahead of cuDNN); the tiled one otherwise (exact fp32, fewer channels, pixels or
    multiply-adds, a residual not channels_last, the statistics epilogue)."""
    def kind(shape, dtype=torch.bfloat16, precision="ieee", stride=(1, 1), k=3, **epilogue):
        x = torch.empty(shape, device=DEVICE, dtype=dtype).contiguous(memory_format=CL)
        return conv2d.kernel_kind(x, k, k, shape[1], stride, (k // 2, k // 2), precision, **epilogue)

    layer1 = (32, 64, 16, 16)  # 8192 output pixels (maps the interpreter's transposed tile fits)
    assert kind(layer1) == "transposed" and kind(layer1, torch.float16) == "transposed"
    assert kind(layer1, torch.float32, "tf32") == "transposed"
    assert kind(layer1, torch.float32, "ieee") == "tiled"
    assert kind((31, 64, 16, 16)) == "tiled" and kind((32, 48, 16, 16)) == "tiled"
    assert kind((512, 512, 4, 4), torch.float32, "tf32") == "transposed"
    assert kind(layer1, stride=(2, 2)) == "tiled"  # 2048 output pixels
    stride2 = (128, 64, 32, 32)  # 32768 output pixels, 1.2 G multiply-adds at 3 x 3
    assert kind(stride2, stride=(2, 2)) == "tiled"
    assert kind(stride2, torch.float32, "tf32", stride=(2, 2)) == "transposed"
    assert kind(stride2, torch.float32, "tf32", stride=(2, 2), k=1) == "transposed"
    assert kind((512, 128, 16, 16), stride=(2, 2)) == "transposed"  # 4.8 G
    assert kind((512, 128, 16, 16), stride=(2, 2), k=1) == "tiled"  # 0.5 G
    assert kind((2, 512, 8, 8), stride=(2, 2)) == "tiled"  # cuDNN's rule is stride 1's
    residual = torch.empty(32, 64, 16, 16, device=DEVICE, dtype=torch.bfloat16)
    assert kind(layer1, residual=residual.contiguous(memory_format=CL)) == "transposed"
    assert kind(layer1, residual=residual) == "tiled" and kind(layer1, stats=True) == "tiled"
    wide = (2, 512, 4, 4)  # 32 output pixels: ahead of cuDNN in 16-bit only
    assert kind(wide) == "transposed"
    assert kind(wide, torch.float32, "tf32") == "tiled"
    assert kind(layer1, path="tiled") == "tiled"


def test_transposed_weight_layout_and_poisoned_output():
    """A channels_last weight in x's dtype is the kernel's (C_out, KH, KW, C_in) layout as it is (a view, no
    copy); another is packed once per version; the kernel writes every element of a poisoned output."""
    x = torch.randn(2, 16, 4, 8, device=DEVICE).contiguous(memory_format=CL)
    w = torch.randn(24, 16, 3, 3, device=DEVICE).contiguous(memory_format=CL)
    view = conv2d.packed_weight(w, torch.float32, transposed=True)
    assert view.data_ptr() == w.data_ptr() and view.shape == (24, 3, 3, 16)
    dense = torch.randn(24, 16, 3, 3, device=DEVICE)
    packed = conv2d.packed_weight(dense, torch.float32, transposed=True)
    assert packed.is_contiguous() and packed is conv2d.packed_weight(dense, torch.float32, transposed=True)
    assert conv2d.packed_weight(dense, torch.float32) is not packed  # the tiled layout is cached apart
    out = poison_(torch.empty(2, 24, 4, 8, device=DEVICE).contiguous(memory_format=CL))
    y = conv2d.conv2d_transposed_forward(x, packed, out=out)
    assert y is out and not torch.isnan(y).any()
    assert_close(y, ref_conv(x.double(), dense.double(), padding=1), torch.float32)


FLAT_TILES = Config({"BLOCK_M": 16, "BLOCK_N": 16, "GROUP_M": 2}, 4, 1)
FLAT_DW_TILES = Config({"BLOCK_M": 16, "BLOCK_N": 16}, 4, 1)


@pytest.mark.parametrize("C,k,stride,pad", [(3, 3, 1, 1), (3, 3, 2, 1), (5, 3, 1, 2), (14, 3, 2, 0), (37, 1, 1, 0),
                                            (2, 5, 1, 2)])
def test_flat_kernels_every_dim(C, k, stride, pad):
    """The flat-K forward and weight gradient with forced 16 x 16 tiles: K from 9 to 126 (K_PAD 16 to 128, the
    37-channel 1 x 1 forced onto the path), several row blocks per weight-gradient program (a ragged last one,
    rows crossing image rows and samples), two column blocks of the 18 output channels, a poisoned output;
    against float64, NCHW x included."""
    x, w, b, r = _inputs(3, C, 9, 7, 18, k, stride, pad, True, True, torch.float32, "channels_last")
    out = poison_(torch.empty(r.shape, device=DEVICE).contiguous(memory_format=CL))
    y = conv2d.conv2d_forward(x, conv2d.pack_weight(w), b, r, (stride, stride), (pad, pad), "relu", out=out,
                              path="flat", config=FLAT_TILES)
    assert y is out and not torch.isnan(y).any()
    assert_close(y, ref_conv(x.double(), w.double(), b.double(), stride, pad, r.double(), "relu"), torch.float32)
    x64, w64 = x.double(), w.double().requires_grad_()
    z = ref_conv(x64, w64, None, stride, pad)
    dz = torch.randn(z.shape, dtype=torch.float64)
    z.backward(dz)
    for xs, ws in ((x, w), (x.contiguous(), w.contiguous(memory_format=CL))):
        dw = conv2d.conv2d_weight_grad_flat(xs, dz.float().to(DEVICE).contiguous(memory_format=CL), ws,
                                            (stride, stride), (pad, pad), config=FLAT_DW_TILES)
        assert dw.shape == ws.shape and dw.stride() == ws.stride() and dw.dtype == torch.float32
        assert_close(dw, w64.grad, torch.float32, name="dweight")


def test_flat_weight_gradient_in_a_double_backward_raises():
    """create_graph=True through the flat-K path: the gradients equal the plain backward's, and a second
    derivative through the weight gradient (a kernel without a derivative) raises instead of missing a term."""
    x, w, _, _ = _inputs(2, 3, 6, 6, 8, 3, 1, 1, False, False, torch.float32, "channels_last")
    grads = []
    for create_graph in (False, True):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w)]
        y = conv2d.conv2d(*leaves, None, 1, 1, activation="relu")
        grads.append(torch.autograd.grad(y.square().sum(), leaves, create_graph=create_graph))
    for plain, graphed in zip(*grads):
        assert torch.equal(graphed, plain)
    with pytest.raises(RuntimeError, match="double backward is not supported by tk::conv2d_weight_grad_flat"):
        grads[1][1].sum().backward()


@pytest.mark.parametrize("k,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 2, 0)])
def test_small_tiles_every_dim(k, stride, pad):
    """Forced 16 x 16 x 16 tiles: several tiles along the pixels (crossing rows and samples, a ragged last
    one), the output channels and C_in (two channel blocks per tap), in grouped order; the output buffer
    poisoned first, so an unwritten element fails."""
    x, w, b, r = _inputs(2, 20, 7, 6, 18, k, stride, pad, True, True, torch.float32, "channels_last")
    wp = conv2d.pack_weight(w)
    out = poison_(torch.empty(r.shape, device=DEVICE).contiguous(memory_format=CL))
    y = conv2d.conv2d_forward(x, wp, b, r, (stride, stride), (pad, pad), "relu", out=out, config=SMALL_TILES)
    assert y is out and not torch.isnan(y).any()
    assert_close(y, ref_conv(x.double(), w.double(), b.double(), stride, pad, r.double(), "relu"), torch.float32)


def test_weight_in_another_dtype():
    """An fp32 weight under fp16 activations (what autocast hands conv2d): cast to fp16 when packed, the
    output fp16, the weight's gradient fp32; all as torch's fp16 conv of the cast weight, against float64."""
    x, w, b, r = _inputs(2, 6, 7, 5, 9, 3, 2, 1, True, False, torch.float16, "channels_last")
    w32 = w.float().requires_grad_()
    xs = x.clone().requires_grad_()
    y = conv2d.conv2d(xs, w32, b, 2, 1, activation="relu")
    assert y.dtype == torch.float16
    x64, w64 = x.double().requires_grad_(), w32.detach().double().requires_grad_()
    ref = ref_conv(x64, w64, b.double(), 2, 1) * (y.detach().double() > 0)
    assert_close(y, functional.relu(ref_conv(x64, w64, b.double(), 2, 1)), torch.float16)
    g = torch.randn(ref.shape, dtype=torch.float64)
    y.backward(g.half())
    ref.backward(g)
    assert w32.grad.dtype == torch.float32
    assert_close(w32.grad, w64.grad, torch.float16, name="dweight")
    assert_close(xs.grad, x64.grad, torch.float16, name="dx")


def test_nan_propagates_like_torch():
    x = torch.randn(2, 4, 6, 6, device=DEVICE).contiguous(memory_format=CL)
    x[1, 2, 3, 3] = float("nan")
    w, b = torch.randn(5, 4, 3, 3, device=DEVICE), torch.randn(5, device=DEVICE)
    with torch.no_grad():
        y = conv2d.conv2d(x, w, b, 1, 1, activation="relu")
    assert torch.equal(torch.isnan(y), torch.isnan(ref_conv(x, w, b, 1, 1, None, "relu")))


# ------------------------------------------------------------------------------------------ view matrix
VIEW_ARGS = {"x": Arg((2, 3, 5, 4)), "weight": Arg((4, 3, 3, 3)), "bias": Arg((4,), broadcast=(0,)),
             "residual": Arg((2, 4, 5, 4), broadcast=(0, 2))}


def view_case(arg: str, layout: str, dtype_name: str, device: str = DEVICE) -> None:
    """One (argument, layout) case of the matrix: output and every base's gradient vs float64."""
    case = next(c for c in view_cases(VIEW_ARGS) if (c.arg, c.layout) == (arg, layout))
    check_case(case, VIEW_ARGS, lambda x, weight, bias, residual: conv2d.conv2d(x, weight, bias, 1, 1, residual),
               lambda x, weight, bias, residual: ref_conv(x, weight, bias, 1, 1, residual),
               dtype=DTYPE_NAMES[dtype_name], device=device)


@pytest.mark.parametrize("case", view_cases(VIEW_ARGS), ids=str)
def test_views(case):
    view_case(case.arg, case.layout, "float32")


# ------------------------------------------------------------------------------------------ eager fast path
@pytest.mark.parametrize("C,path", [(3, "auto"), (20, "auto"), (3, "tiled")])
def test_fast_path_matches_the_general_path(C, path):
    """A signature's second call runs the fast path (conv2d_eager: its own autograd node) and gives the first
    call's output and gradients exactly; an in-place weight update is seen (the packed weight is per version);
    a call with other strides or bad input takes the general path again (and raises)."""
    from triton_kernels import conv2d_eager

    x, w, b, r = _inputs(2, C, 7, 6, 18, 3, 1, 1, True, True, torch.float32, "channels_last")
    leaves = [t.clone().requires_grad_() for t in (x, w, b, r)]
    assert_fast_path_repeats(lambda: conv2d.conv2d(*leaves[:3], 1, 1, leaves[3], "relu", path=path), leaves,
                             torch.randn(2, 18, 7, 6, device=DEVICE), ("dx", "dweight", "dbias", "dresidual"))
    with torch.no_grad():
        leaves[1].mul_(-1)  # a new weight version: repacked
        y = conv2d.conv2d(*leaves[:3], 1, 1, leaves[3], "relu", path=path)
    assert_close(y, ref_conv(x.double(), -w.double(), b.double(), 1, 1, r.double(), "relu"), torch.float32)
    y = conv2d.conv2d(leaves[0].detach().contiguous(), *leaves[1:3], 1, 1, leaves[3], "relu", path=path)
    assert type(y.grad_fn).__name__ != "_NodeBackward"  # NCHW x: another signature, the general path
    assert conv2d_eager._key(x, w, b, r, 1, 1, "relu", runtime.torch_conv_precision(x), path) in conv2d_eager._FAST
    with pytest.raises(ValueError, match="x has dtype"):
        conv2d.conv2d(x.int(), w, b, 1, 1, r, "relu", path=path)


def test_default_precision_is_torchs_conv_precision():
    """precision=None (the default of conv2d and conv2d_bn_stats) runs what torch's own conv2d runs, read at each
    call: "tf32" for fp32 while torch lets cuDNN use TF32 for convolutions (its default), "ieee" after
    torch.backends.cudnn.allow_tf32 = False or .conv.fp32_precision = "ieee"; 16-bit inputs "ieee". Each eager
    call signature is remembered with the precision it ran."""
    from triton_kernels import conv2d_eager

    x, w, _, _ = _inputs(2, 20, 6, 6, 8, 3, 1, 1, False, False, torch.float32, "channels_last")
    for allow, want in ((True, "tf32"), (False, "ieee")):
        with cudnn_tf32(allow):
            assert runtime.torch_conv_precision(x) == want
            assert runtime.torch_conv_precision(x.half()) == "ieee"
            y = conv2d.conv2d(x, w, None, 1, 1)
            assert conv2d_eager._key(x, w, None, None, 1, 1, "none", want, "auto") in conv2d_eager._FAST, allow
            assert_close(y, ref_conv(x.double(), w.double(), None, 1, 1), torch.float32, tf32=allow and x.is_cuda)
    with cudnn_tf32(True):
        torch.backends.cudnn.conv.fp32_precision = "ieee"  # the newer API, conv only
        assert runtime.torch_conv_precision(x) == "ieee"
    with pytest.raises(ValueError, match="precision must be"):
        conv2d.conv2d(x, w, precision="fp32")


# ------------------------------------------------------------------------------------------ weight cache
def test_forward_weight_layouts():
    """The weight each forward kernel reads: (KH, KW, C_in, C_out) with C_out innermost (B tiles N-major) for
    16-bit and exact fp32; at tf32 the same shape with C_in innermost (K-major B tiles, what tf32 tensor-core
    products read), over the transposed kernel's (C_out, KH, KW, C_in) pack; the values are the weight's."""
    w = torch.randn(6, 4, 3, 2, device=DEVICE)
    want = w.permute(2, 3, 1, 0)
    for dtype, precision, inner in ((torch.float32, "ieee", 3), (torch.float32, "tf32", 2), (torch.float16, "tf32", 3)):
        got = conv2d.forward_weight(w, dtype, False, precision)
        assert got.shape == want.shape and got.stride(inner) == 1 and torch.equal(got.float(), want.to(dtype).float())
    transposed = conv2d.forward_weight(w, torch.float32, True, "tf32")
    assert transposed.is_contiguous() and torch.equal(transposed, w.permute(0, 2, 3, 1))


def test_packed_weight_is_cached_until_the_weight_changes():
    """One pack per weight version: repeated calls reuse it (ieee calls: fp32 at tf32 reads the transposed
    layout); an optimizer step (in place: a new version)
    repacks; a write through .data is not seen until clear_packed_weights(); a freed weight's entry goes;
    an inference tensor is packed on every call."""
    conv = torch.nn.Conv2d(4, 6, 3, padding=1, device=DEVICE)
    first = conv2d.packed_weight(conv.weight)
    assert conv2d.packed_weight(conv.weight) is first
    assert torch.equal(first, conv.weight.detach().permute(2, 3, 1, 0)) and first.is_contiguous()
    x = torch.randn(2, 4, 5, 5, device=DEVICE).contiguous(memory_format=CL)
    conv2d.conv2d(x, conv.weight, conv.bias, 1, 1, precision="ieee").square().sum().backward()
    torch.optim.SGD(conv.parameters(), lr=0.5).step()
    second = conv2d.packed_weight(conv.weight)
    assert second is not first and torch.equal(second, conv.weight.detach().permute(2, 3, 1, 0))
    with torch.no_grad():
        assert_close(conv2d.conv2d(x, conv.weight, conv.bias, 1, 1, precision="ieee"),
                     ref_conv(x.double(), conv.weight.double(), conv.bias.double(), 1, 1), torch.float32)
    conv.weight.data.mul_(2)  # .data has a version counter of its own: the cache cannot see this write
    assert conv2d.packed_weight(conv.weight) is second
    conv2d.clear_packed_weights()
    assert torch.equal(conv2d.packed_weight(conv.weight), conv.weight.detach().permute(2, 3, 1, 0))
    before = len(conv2d._PACKED)
    del conv
    gc.collect()
    assert len(conv2d._PACKED) == before - 1
    with torch.inference_mode():  # an inference tensor has no version counter: packed on every call, uncached
        w = torch.randn(6, 4, 3, 3, device=DEVICE)
        y = conv2d.conv2d(x, w, None, 1, 1)
    assert_close(y, ref_conv(x.double(), w.double(), None, 1, 1), torch.float32)
    assert len(conv2d._PACKED) == before - 1


# ------------------------------------------------------------------------------------------ BN statistics
@pytest.mark.parametrize("config,offset", [(SMALL_TILES, 0.0), (None, 0.0), (SMALL_TILES, 100.0)])
def test_bn_statistics_variant(config, offset):
    """The STATS epilogue: per-tile partials (sum and M2 about the tile mean, rows past M excluded) and their
    merge equal float64's batch mean and biased variance of the pre-activation; the output is unchanged.
    offset 100: a mean 100 times the spread, where E[z^2] - E[z]^2 in fp32 loses most digits (checked) and
    the centred partials still hold fp32's tolerance."""
    x, w, b, r = _inputs(2, 6, 7, 5, 20, 3, 1, 1, True, True, torch.float32, "channels_last")
    b = b + offset
    z = ref_conv(x.double(), w.double(), b.double(), 1, 1, r.double())
    with torch.no_grad():
        y, mean, var = conv2d.conv2d_bn_stats(x, w, b, 1, 1, r, activation="relu", config=config)
    assert_close(y, functional.relu(z), torch.float32)
    z_rows = z.permute(0, 2, 3, 1).reshape(-1, 20)
    assert_close(mean, z_rows.mean(0), torch.float32, name="mean")
    assert_close(var, z_rows.var(0, unbiased=False), torch.float32, name="var")
    if offset:
        z32 = z_rows.float()
        naive = z32.square().mean(0) - z32.mean(0).square()
        assert rel_err(naive, z_rows.var(0, unbiased=False)) > 10 * tolerance(torch.float32)
    if config is not None:
        _, part = conv2d.conv2d_forward(x, conv2d.pack_weight(w), b, r, (1, 1), (1, 1), stats=True, config=config)
        assert part.shape == (2, 5, 20)  # 70 pixels in tiles of 16: the last one holds 6
        for t, rows in enumerate(z_rows.split(16)):
            assert_close(part[0, t], rows.sum(0), torch.float32, name=f"sum of tile {t}")
            assert_close(part[1, t], (rows - rows.mean(0)).square().sum(0), torch.float32, name=f"M2 of tile {t}")


# ------------------------------------------------------------------------------------------ model, suite
def test_resnet_layers_on_the_triton_conv():
    """A tiny ResNet whose every conv runs CONV_IMPLEMENTATIONS["triton"] (3x3 and 1x1, stride 1 and 2):
    forward and every parameter gradient as the cuDNN one's in float64 (within 4x of torch's own error);
    choose_conv gives the Triton conv to the listed shapes only (the 3 -> 64 stem), on the triton backends."""
    from models.resnet import Conv2d, ResNet, choose_conv

    torch.manual_seed(0)
    ref = ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16)).to(DEVICE)
    ours = ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16), backend="triton").to(DEVICE)
    ours.load_state_dict(ref.state_dict())
    convs = [m for m in ours.modules() if isinstance(m, Conv2d)]
    assert [choose_conv(m, "triton") for m in convs] == ["cudnn"] * len(convs)  # widths 4..16: none listed
    stem = ResNet((1, 1, 1, 1), backend="triton").conv1
    assert stem.impl == "triton" and choose_conv(stem, "eager") == "cudnn"
    for m in convs:
        m.impl = "triton"
    ref64 = ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16)).double().to(DEVICE)  # eager: cuDNN + torch's BN
    ref64.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 8, 8, device=DEVICE).contiguous(memory_format=CL)
    base = ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16), backend="triton").to(DEVICE)
    base.load_state_dict(ref.state_dict())
    outs = {"ours": ours(x), "base": base(x), "ref": ref64(x.double())}
    assert rel_err(outs["ours"], outs["ref"]) <= max(4 * rel_err(outs["base"], outs["ref"]), 1e-5)
    g = torch.randn_like(outs["ref"])
    for out in outs.values():
        out.backward(g.to(out.dtype))
    for (name, p64), p, pb in zip(ref64.named_parameters(), ours.parameters(), base.parameters()):
        assert rel_err(p.grad, p64.grad) <= max(4 * rel_err(pb.grad, p64.grad), 1e-5), name


def _with_triton_convs(make):
    """Three models with the same (seeded) weights: ``make("eager")`` twice -- the fp32 reference and the
    autocast eager one -- and ``make("triton")`` with every conv on the Triton conv2d."""
    from models.resnet import Conv2d

    torch.manual_seed(0)
    exact, eager, ours = (make(backend) for backend in ("eager", "eager", "triton"))
    eager.load_state_dict(exact.state_dict())
    ours.load_state_dict(exact.state_dict())
    for m in ours.modules():
        if isinstance(m, Conv2d):
            m.impl = "triton"
    return exact, eager, ours


def test_resnet_triton_convs_under_autocast():
    """Under fp16 autocast (the CPU's stand-in for the GPU's bf16) the Triton convs compute in fp16 from the
    fp32 weights (cast when packed) and return fp32 weight gradients: a training step's loss and every
    gradient are no further from the fp32 step's than the autocast cuDNN model's (2x, with a floor)."""
    from models.resnet import ResNet

    exact, eager, ours = _with_triton_convs(
        lambda backend: ResNet((1, 1, 1, 1), widths=(4, 8, 8, 16), backend=backend).to(DEVICE).to(memory_format=CL))
    x = torch.randn(4, 3, 8, 8, device=DEVICE).contiguous(memory_format=CL)
    labels = torch.randint(0, 10, (4,), device=DEVICE)
    losses = []
    for model, amp in ((exact, False), (eager, True), (ours, True)):
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.float16, enabled=amp):
            loss = functional.cross_entropy(model(x).float(), labels)
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[2] - losses[0]) <= max(2 * abs(losses[1] - losses[0]), 1e-2 * abs(losses[0]))
    for (name, p32), pe, po in zip(exact.named_parameters(), eager.parameters(), ours.parameters()):
        assert po.grad.dtype == torch.float32, name
        assert rel_err(po.grad, p32.grad) <= max(2 * rel_err(pe.grad, p32.grad), 2e-2), name


def test_resnet_512_channel_layer_runs_the_transposed_kernel_on_small_maps_only():
    """A 512-channel 3x3 layer on the Triton convs (TRITON_CONV_SHAPES lists it for the transposed kernel):
    under 16-bit autocast on a map of <= 16 pixels it runs the transposed kernel, right against float64;
    on a larger map, or in fp32, it runs cuDNN's (where the transposed kernel was not measured to win)."""
    from models.resnet import Conv2d

    conv = Conv2d(512, 512, 3, padding=1, bias=False).to(DEVICE).to(memory_format=CL)
    conv.impl = "triton"
    x = torch.randn(1, 512, 2, 2, device=DEVICE).contiguous(memory_format=CL)
    plans = set(conv2d._PLANS)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.float16):
        y = conv(x)
    new = [k for k in set(conv2d._PLANS) - plans if k[3] == "transposed"]
    assert y.dtype == torch.float16 and len(new) == 1
    assert_close(y, ref_conv(x.double(), conv.weight.double(), padding=1), torch.float16)
    plans = set(conv2d._PLANS)
    big = torch.randn(1, 512, 8, 8, device=DEVICE).contiguous(memory_format=CL)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.float16):
        conv(big)
    conv(x)  # fp32
    assert set(conv2d._PLANS) == plans


def test_op_suite_cases_run_through_the_harness():
    """bench/cases/conv2d.py's interpreter cases: every backend checked against float64 and timed (status ok)."""
    from bench.cases import conv2d as cases
    from bench.harness import RunConfig, run_cases

    built = cases.cases(tiny=True)
    assert all(c.flops > 0 and c.bytes > 0 for c in built)
    assert len(cases.cases(tiny=False)) == 11 + 4 + 4 + 1 and len(cases.RESNET18_SHAPES) == 11
    rows = run_cases(built, RunConfig(backends=["eager", "triton"], rounds=1, rep=1), progress=False)
    timed = [r for r in rows if r["metric"] == "time_ms"]
    assert len(timed) == 2 * len(built) and all(r["status"] == "ok" for r in timed), \
        [(r["case"], r["backend"], r["status"], r["note"]) for r in timed if r["status"] != "ok"]


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad,match", [
    (lambda x, w: conv2d.conv2d(x[0], w), "x must have 4 dims"),
    (lambda x, w: conv2d.conv2d(x, w[:, :3]), "C_in must equal"),
    (lambda x, w: conv2d.conv2d(x, w.int()), "weight has dtype"),
    (lambda x, w: conv2d.conv2d(x, w[0]), "weight must have 4 dims"),
    (lambda x, w: conv2d.conv2d(x, w, torch.ones(3)), "bias has 3 elements"),
    (lambda x, w: conv2d.conv2d(x, w, stride=0), "stride must be"),
    (lambda x, w: conv2d.conv2d(x, w, stride=(1, 2, 1)), "stride must be"),
    (lambda x, w: conv2d.conv2d(x, w, padding=-1), "padding must be"),
    (lambda x, w: conv2d.conv2d(x, w, padding=1.5), "padding must be"),
    (lambda x, w: conv2d.conv2d(x[:, :, :2], w), "output would be empty"),
    (lambda x, w: conv2d.conv2d(x, w, residual=torch.ones(2, 5, 6, 5)), "residual has shape"),
    (lambda x, w: conv2d.conv2d(x, w, residual=torch.ones(2, 5, 6, 6, dtype=torch.int32)), "residual has dtype"),
    (lambda x, w: conv2d.conv2d(x, w, activation="gelu"), "activation must be"),
    (lambda x, w: conv2d.conv2d(x, w, precision="fp8"), "precision must be"),
    (lambda x, w: conv2d.conv2d(x, w, path="direct"), "path must be"),
    (lambda x, w: conv2d.conv2d(x.repeat(1, 4, 1, 1), w.repeat(1, 4, 1, 1), path="flat"), "path='flat' needs"),
    (lambda x, w: conv2d.conv2d(x.repeat(1, 2, 1, 1), w.repeat(1, 2, 1, 1), padding=1, path="transposed"),
     "C_in a multiple of 16"),
    (lambda x, w: conv2d.conv2d(x.repeat(1, 4, 1, 1), w.repeat(1, 4, 1, 1), stride=2, path="transposed"),
     "stride 1 or 2 in both dimensions, a map the stride divides and the padding"),
    (lambda x, w: conv2d.conv2d(x.repeat(1, 4, 1, 1), w.repeat(1, 4, 1, 1), padding=1, path="transposed"),
     "dense channels_last"),
    (lambda x, w: conv2d.conv2d_bn_stats(x.repeat(1, 4, 1, 1).contiguous(memory_format=CL), w.repeat(1, 4, 1, 1),
                                         padding=1, path="transposed"), "no batch-norm statistics epilogue"),
    (lambda x, w: conv2d.conv2d_forward(x, conv2d.pack_weight(w), path="transposed"), "conv2d_transposed_forward"),
    (lambda x, w: conv2d.conv2d(x.bfloat16(), w.bfloat16()), "interpreter cannot compute"),
    (lambda x, w: conv2d.conv2d(x, w.to("meta")), "weight is on meta"),
    (lambda x, w: conv2d.conv2d_bn_stats(x, w.requires_grad_()), "not differentiable"),
    (lambda x, w: conv2d.conv2d_forward(x, conv2d.pack_weight(w), out=torch.empty(2, 5, 6, 6)), "out must be"),
    (lambda x, w: conv2d.conv2d_forward(x, conv2d.pack_weight(w), path="flat", config=SMALL_TILES), "not a flat-K"),
    (lambda x, w: conv2d.conv2d_forward(x, conv2d.pack_weight(w), path="tiled", config=FLAT_TILES), "not a tiled"),
])
def test_bad_input_raises(bad, match):
    if "meta" in match and DEVICE != "cpu":
        pytest.skip("the meta check runs on any device; the interpreter-dtype check only on the CPU")
    if "interpreter" in match and DEVICE != "cpu":
        pytest.skip("bf16 is computed on the GPU")
    x = torch.randn(2, 4, 8, 8, device=DEVICE)
    w = torch.randn(5, 4, 3, 3, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        bad(x, w)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", view_cases(VIEW_ARGS), ids=str)
def test_gpu_views(case, dtype_name, isolated):
    isolated("tests.test_conv2d:view_case", case.arg, case.layout, dtype_name, "cuda")


def gpu_resnet_shapes(batch: int, backward: bool, dtype_name: str = "bfloat16", device: str = "cuda") -> None:
    """Every ResNet-18 CIFAR conv shape (bench/cases/conv2d.py) vs float64: forward at ``batch`` (and
    every gradient when ``backward``); the fused epilogue (bias, residual, ReLU) at each stage's 3x3. fp32
    runs at torch's default conv precision (TF32). At batch 512 every 3x3 stride-1 layer from 64 channels
    on runs the transposed kernel ("auto"), and so do the stride-2 3x3 layers and, at tf32, the stride-2 1x1 ones;
    the others the tiled or flat-K one."""
    from bench.cases.conv2d import RESNET18_SHAPES

    dtype = DTYPE_NAMES[dtype_name]
    tf32 = dtype == torch.float32
    for C, H, W, N, k, s in RESNET18_SHAPES:
        if backward:
            _check(batch, C, H, W, N, k, s, k // 2, False, False, "none", dtype, device=device, precision=None,
                   tf32=tf32)
            if k == 3 and s == 1 and C == N:
                _check(batch, C, H, W, N, k, s, 1, True, True, "relu", dtype, device=device, precision=None,
                       tf32=tf32)
            continue
        x, w, _, _ = _inputs(batch, C, H, W, N, k, s, k // 2, False, False, dtype, "channels_last", device)
        kind = conv2d.kernel_kind(x, k, k, N, (s, s), (k // 2, k // 2), "tf32" if tf32 else "ieee")
        if batch == 512:
            assert (kind == "transposed") == (C >= 64 and (k == 3 or tf32)), (C, H, N, k, s, kind)
        with torch.no_grad():
            y = conv2d.conv2d(x, w, None, s, k // 2)
        assert_close(y, ref_conv(x.double(), w.double(), None, s, k // 2), dtype, tf32=tf32,
                     name=str((C, H, W, N, k, s)))


def gpu_transposed_stride2() -> None:
    """The transposed kernel at ResNet-18 CIFAR's stride-2 layers (3 x 3 and 1 x 1, its path forced), bf16 and
    fp32 at tf32, batch 64: forward and every gradient against float64."""
    from bench.cases.conv2d import RESNET18_SHAPES

    for dtype, precision in ((torch.bfloat16, "ieee"), (torch.float32, "tf32")):
        for C, H, W, N, k, s in RESNET18_SHAPES:
            if s == 2:
                _check(64, C, H, W, N, k, s, k // 2, True, False, "relu", dtype, device="cuda", precision=precision,
                       tf32=dtype == torch.float32, path="transposed")


@pytest.mark.gpu
def test_gpu_transposed_stride2(isolated):
    isolated("tests.test_conv2d:gpu_transposed_stride2")


@pytest.mark.gpu
@pytest.mark.parametrize("batch,backward,dtype_name", [(512, False, "bfloat16"), (32, True, "bfloat16"),
                                                       (512, False, "float32"), (32, True, "float32")])
def test_gpu_resnet18_shapes(batch, backward, dtype_name, isolated):
    isolated("tests.test_conv2d:gpu_resnet_shapes", batch, backward, dtype_name)


def gpu_tf32_stats_and_compile() -> None:
    """fp32 with tf32 dots; the statistics variant at a ResNet shape, eager and compiled; torch.compile(
    fullgraph=True) over the op (forward and every gradient) equals the eager call."""
    _check(16, 64, 16, 16, 96, 3, 1, 1, True, True, "relu", torch.float32, device="cuda", precision="tf32",
           tf32=True)
    x, w, b, r = _inputs(64, 128, 16, 16, 128, 3, 1, 1, True, True, torch.bfloat16, "channels_last", "cuda")
    with torch.no_grad():
        y, mean, var = conv2d.conv2d_bn_stats(x, w, b, 1, 1, r)
    z = ref_conv(x.double(), w.double(), b.double(), 1, 1, r.double()).permute(0, 2, 3, 1).reshape(-1, 128)
    assert_close(mean, z.mean(0), torch.bfloat16, name="mean")
    assert_close(var, z.var(0, unbiased=False), torch.bfloat16, name="var")
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(lambda *args: conv2d.conv2d_bn_stats(*args[:3], 1, 1, args[3]), fullgraph=True)
        for name, eager, comp in zip(("y", "mean", "var"), (y, mean, var), compiled(x, w, b, r)):
            assert_close(comp, eager.double(), torch.bfloat16, name=f"compiled {name}")
    leaves = [t.detach().requires_grad_() for t in (x, w, b, r)]
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, b, r: conv2d.conv2d(x, w, b, 1, 1, r, "relu").float().square().sum(),
                       fullgraph=True)
    fn(*leaves).backward()
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    conv2d.conv2d(*leaves[:3], 1, 1, leaves[3], "relu").float().square().sum().backward()
    for name, g1, t in zip(("dx", "dw", "dbias", "dresidual"), grads, leaves):
        assert rel_err(g1, t.grad) < 1e-2, name


@pytest.mark.gpu
def test_gpu_tf32_stats_and_compile(isolated):
    isolated("tests.test_conv2d:gpu_tf32_stats_and_compile")


def gpu_default_precision_follows_torch() -> None:
    """On the GPU, where tf32 differs from ieee: precision=None gives the tf32 result while cuDNN may use TF32
    for convolutions and the ieee one after allow_tf32 = False, as an eager call and under torch.compile
    (read as each compiled call runs, so a setting changed after compiling is followed)."""
    x, w, _, _ = _inputs(16, 64, 16, 16, 96, 3, 1, 1, False, False, torch.float32, "channels_last", "cuda")
    with torch.no_grad():
        by_precision = {p: conv2d.conv2d(x, w, None, 1, 1, precision=p) for p in ("ieee", "tf32")}
        assert not torch.equal(by_precision["ieee"], by_precision["tf32"])
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, w: conv2d.conv2d(x, w, None, 1, 1), fullgraph=True)
        for allow, precision in ((True, "tf32"), (False, "ieee"), (True, "tf32")):
            with cudnn_tf32(allow):
                assert torch.equal(conv2d.conv2d(x, w, None, 1, 1), by_precision[precision]), allow
                assert torch.equal(compiled(x, w), by_precision[precision]), allow


@pytest.mark.gpu
def test_gpu_default_precision_follows_torch(isolated):
    isolated("tests.test_conv2d:gpu_default_precision_follows_torch")


def gpu_resnet18_triton_convs() -> None:
    """ResNet-18 (triton backend) with EVERY conv on the Triton conv2d, one bf16-autocast training step from
    the same weights as an fp32 eager step (tf32 off) and an autocast eager one: loss and gradients no
    further from fp32 than eager bf16's (2x, with a floor); then the same model under
    torch.compile(fullgraph=True) is held to the same bounds."""
    from models.resnet import resnet

    from .fp32_step import Fp32StepBounds

    exact, eager, ours = _with_triton_convs(
        lambda backend: resnet("resnet18", backend=backend).cuda().to(memory_format=CL))
    x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=CL)
    bounds = Fp32StepBounds(exact, eager, x, torch.randint(0, 10, (64,), device="cuda"))
    bounds.check(ours)
    ours.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    bounds.check(ours, torch.compile(ours, fullgraph=True))


@pytest.mark.gpu
def test_gpu_resnet18_triton_convs(isolated):
    isolated("tests.test_conv2d:gpu_resnet18_triton_convs")


def gpu_autotune_picks_a_config() -> None:
    import os

    os.environ["TRITON_PLAYGROUND_AUTOTUNE"] = "1"
    try:
        x, w, _, _ = _inputs(128, 128, 16, 16, 128, 3, 1, 1, False, False, torch.bfloat16, "channels_last", "cuda")
        for path, tuner in (("tiled", conv2d._tuner), ("auto", conv2d._transposed_tuner)):
            with torch.no_grad():
                y = conv2d.conv2d(x, w, None, 1, 1, path=path)
            assert_close(y, ref_conv(x.double(), w.double(), None, 1, 1), torch.bfloat16, name=path)
            assert any(what in ("tuned", "hit") for _, what in tuner.events), path
    finally:
        os.environ["TRITON_PLAYGROUND_AUTOTUNE"] = "0"


@pytest.mark.gpu
def test_gpu_autotune(isolated):
    isolated("tests.test_conv2d:gpu_autotune_picks_a_config")
