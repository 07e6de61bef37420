"""ResNet-18 / ResNet-34, CIFAR variant (3x3 stride-1 stem, no max-pool), with a backend switch.

Backends (``model.set_backend(name)`` or the ``backend=`` argument; :func:`compile_model` wraps the two
"+compile" kinds):
    eager            torch ops, as torchvision writes a BasicBlock: conv -> BatchNorm2d -> ReLU, ...,
                     out += identity, ReLU; adaptive average pool + Linear.
    compile          the eager model under torch.compile.
    triton           BatchNorm + ReLU and BatchNorm + residual add + ReLU are one Triton op each
                     (triton_kernels.batchnorm: a statistics pass and an apply pass forward, a reduction
                     pass and an elementwise pass backward; a block's last batch norm and its shortcut's
                     run as one pair, and the shortcut reads a subsampled copy of its input, see
                     BasicBlock); the pool + linear head is one Triton op
                     (triton_kernels.pool_head); convolutions run through :data:`CONV_IMPLEMENTATIONS`
                     ("cudnn", or the Triton implicit GEMM where :func:`choose_conv` names it).
    triton+compile   the triton model under torch.compile (the Triton ops are registered torch ops, so
                     ``fullgraph=True`` holds).
Parameter and buffer names are torchvision's (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0 / .1,
fc), so one state_dict loads into every backend. ``no_batch_norm=True`` drops every BatchNorm (the
convolutions then get a bias, the only shift left); the relu / add then run as torch ops on every backend.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Callable, Iterator

import torch
from torch.nn import functional
from torch import nn

from triton_kernels import batchnorm
from triton_kernels import conv2d as _conv2d
from triton_kernels import foreach_cast
from triton_kernels import pool_head as _pool_head

BACKENDS = ("eager", "compile", "triton", "triton+compile")
LAYERS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
WIDTHS = (64, 128, 256, 512)


# --------------------------------------------------------------------------------------------------
# Convolutions: where a Triton implicit-GEMM conv2d plugs in
# --------------------------------------------------------------------------------------------------
def _weight(conv: nn.Conv2d) -> torch.Tensor:
    """The layer's weight as ResNet's prologue cast it for this forward (``cast_weight``), else its own."""
    return conv.weight if getattr(conv, "cast_weight", None) is None else conv.cast_weight


def _conv_cudnn(conv: nn.Conv2d, x: torch.Tensor, stride=None) -> torch.Tensor:
    """torch's conv2d with the layer's arguments (``stride``: another stride than the layer's)."""
    return functional.conv2d(x, _weight(conv), conv.bias, conv.stride if stride is None else stride, conv.padding,
                             conv.dilation, conv.groups)


def _conv_triton(conv: nn.Conv2d, x: torch.Tensor, stride=None) -> torch.Tensor:
    """triton_kernels.conv2d's implicit GEMM (the layer must pass :func:`triton_conv_supports`). Under
    autocast it computes in the autocast dtype, as torch's conv2d does there: x and the bias are cast, the
    fp32 weight is cast when packed (once per weight version), or taken as ResNet's prologue cast it
    (``cast_weight``), and its gradient returns in fp32."""
    if not triton_conv_supports(conv):
        raise ValueError(f"the Triton conv2d runs zero-padded, undilated, ungrouped convolutions with int padding; "
                         f"got {conv}")
    bias = conv.bias
    if torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        x = x.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    if conv.in_channels >= _conv2d.TRANSPOSED_MIN_C and not _conv2d.transposed_wins(x):
        return _conv_cudnn(conv, x, stride)  # a layer listed for the transposed kernel, off the inputs it wins on
    return _conv2d.conv2d(x, _weight(conv), bias, conv.stride if stride is None else stride, conv.padding)


def triton_conv_supports(conv: nn.Conv2d) -> bool:
    return (conv.groups == 1 and tuple(conv.dilation) == (1, 1) and conv.padding_mode == "zeros"
            and not isinstance(conv.padding, str))


# name -> fn(conv module, x, stride=None: the layer's). "triton" is the implicit-GEMM conv2d
# (triton_kernels/conv2d.py: 3x3 and 1x1, stride 1 and 2, fused bias; its backward is cuDNN's), benchmarked
# against cuDNN at every ResNet-18 layer shape by `python -m bench.ops --op conv2d`.
CONV_IMPLEMENTATIONS: dict[str, Callable[[nn.Conv2d, torch.Tensor], torch.Tensor]] = {
    "cudnn": _conv_cudnn, "triton": _conv_triton}

# THE place where the convolution choice is made: the (kernel size, stride, C_in, C_out) of the layers that
# run the Triton conv2d on the triton backends, where a GPU run of `python -m bench.ops --op conv2d` shows
# the Triton kernel ahead of cuDNN (and the step time of bench.resnet confirms it). The stem: its 3 input
# channels take the flat-K kernels, forward and weight gradient (results/NOTES.md, session 19). The last
# stage's 512-channel 3x3 stride-1 layers (4 x 4 maps on CIFAR): the transposed kernel's forward, 1.33x
# cuDNN's (session 26's probe), backward cuDNN's. Every other layer stays on cuDNN, which the tiled kernel
# does not beat.
TRITON_CONV_SHAPES: frozenset[tuple[int, int, int, int]] = frozenset({(3, 1, 3, 64), (3, 1, 512, 512)})


def conv_shape(conv: nn.Conv2d) -> tuple[int, int, int, int]:
    return conv.kernel_size[0], conv.stride[0], conv.in_channels, conv.out_channels


def choose_conv(conv: nn.Conv2d, backend: str) -> str:
    """The convolution implementation a layer uses on a backend: "triton" for the shapes in
    TRITON_CONV_SHAPES on the triton backends, else "cudnn"."""
    if backend.startswith("triton") and conv_shape(conv) in TRITON_CONV_SHAPES and triton_conv_supports(conv):
        return "triton"
    return "cudnn"


def _set_plain(module: nn.Module, name: str, value) -> None:
    """module.<name> = value for a plain attribute (no parameter, buffer or submodule of that name), without
    nn.Module.__setattr__'s registration checks: ResNet's prologue sets two per layer on every step."""
    object.__setattr__(module, name, value)


class Conv2d(nn.Conv2d):
    """nn.Conv2d whose forward goes through CONV_IMPLEMENTATIONS[self.impl] (same parameters).
    ``cast_weight``: the weight already cast to the autocast dtype, set by ResNet for the length of one
    forward (one launch casts every layer's weight, see ResNet.one_launch_prologue); None otherwise."""

    impl = "cudnn"
    cast_weight: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return CONV_IMPLEMENTATIONS[self.impl](self, x)

    def reads_one_in(self) -> int:
        """s when this is a 1x1 convolution of stride s (both ways) without padding: it reads only
        input[:, :, ::s, ::s] (see :meth:`forward_subsampled`); else 1."""
        s = self.stride[0]
        return s if (self.kernel_size == (1, 1) and tuple(self.padding) == (0, 0) and self.stride == (s, s)
                     and self.dilation == (1, 1)) else 1

    def forward_subsampled(self, x: torch.Tensor) -> torch.Tensor:
        """This layer's output from x = input[:, :, ::s, ::s] (s = :meth:`reads_one_in`): the same
        convolution at stride 1."""
        return CONV_IMPLEMENTATIONS[self.impl](self, x, 1)


# --------------------------------------------------------------------------------------------------
# Normalisation + activation
# --------------------------------------------------------------------------------------------------
class BatchNormAct2d(nn.BatchNorm2d):
    """nn.BatchNorm2d, then ``+ residual`` (when given) and ReLU (when ``relu``): forward(x, residual=None).

    On the eager backends these are torch's batch_norm, an in-place add and an in-place ReLU; with
    ``fused = True`` (the triton backends) one Triton op does all three, forward and backward. Momentum,
    num_batches_tracked and track_running_stats behave exactly as in nn.BatchNorm2d. ``counted``: this
    forward's num_batches_tracked increment is done already (ResNet.one_launch_prologue does every layer's
    in one launch). ``two_outputs`` (fused only): return (y, y2) for a y that a block uses twice, y2 sharing
    its memory, so that the backward gets the two gradients apart and adds them in its kernels
    (triton_kernels.batchnorm.batch_norm's two_outputs); ``second_stride`` s > 1: y2 = y[:, :, ::s, ::s], for a
    shortcut that reads only that (its gradient then comes that small: batch_norm's second_stride)."""

    def __init__(self, num_features: int, relu: bool = True, **kwargs) -> None:
        super().__init__(num_features, **kwargs)
        self.relu = relu
        self.fused = False
        self.counted = False
        self.two_outputs = False
        self.second_stride = 1

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if not self.fused:
            y = super().forward(x)
            if residual is not None:
                y += residual
            return functional.relu(y, inplace=True) if self.relu else y
        factor = self._factor()
        training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        return batchnorm.batch_norm(x, self.running_mean if use_running else None,
                                    self.running_var if use_running else None,
                                    self.weight, self.bias, training, factor, self.eps,
                                    residual=residual, relu=self.relu, two_outputs=self.two_outputs,
                                    second_stride=self.second_stride)

    def _factor(self) -> float:
        """This forward's running-statistics factor (nn.BatchNorm2d's exponential_average_factor), after
        counting the batch in num_batches_tracked (unless ``counted``)."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            if not self.counted:
                self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        return factor

    def pairs_with(self, shortcut: nn.Module) -> bool:
        """Whether :meth:`forward_with_shortcut` fuses this layer with ``shortcut``'s batch norm: both fused,
        training with running statistics, the shortcut's without relu."""
        return (isinstance(shortcut, BatchNormAct2d) and self.fused and shortcut.fused and not shortcut.relu
                and all(m.training and m.running_mean is not None and m.running_var is not None
                        for m in (self, shortcut)))

    def forward_with_shortcut(self, x: torch.Tensor, res_x: torch.Tensor, shortcut: "BatchNormAct2d"):
        """``self(x, shortcut(res_x))`` (see :meth:`pairs_with`) as batchnorm.batch_norm_pair: the shortcut's
        output is normalised inside this layer's apply and never written."""
        if not self.pairs_with(shortcut):
            return self(x, shortcut(res_x))
        return batchnorm.batch_norm_pair(x, res_x, self.running_mean, self.running_var, self.weight, self.bias,
                                         shortcut.running_mean, shortcut.running_var, shortcut.weight, shortcut.bias,
                                         self._factor(), self.eps, shortcut._factor(), shortcut.eps, self.relu,
                                         self.two_outputs, self.second_stride)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, relu={self.relu}"


class AddAct(nn.Module):
    """What is left of BatchNormAct2d without batch norm: ``+ residual`` and ReLU (no parameters)."""

    def __init__(self, relu: bool = True) -> None:
        super().__init__()
        self.relu = relu

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if residual is not None:
            x = x + residual
        return functional.relu(x) if self.relu else x


def _norm(channels: int, relu: bool, no_batch_norm: bool) -> nn.Module:
    return AddAct(relu) if no_batch_norm else BatchNormAct2d(channels, relu=relu)


# --------------------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 convolutions; out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut a
    1x1 convolution + BatchNorm when the shape changes. x may come as a pair (x, x2) (the previous batch
    norm's two_outputs): conv1 takes x, the shortcut x2, which is x or, when smaller, x[:, :, ::s, ::s] for the
    shortcut's 1x1 stride-s convolution, run at stride 1 on it. On the triton backends in training, bn2 and the
    shortcut's batch norm run as one pair (BatchNormAct2d.forward_with_shortcut)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, no_batch_norm: bool = False) -> None:
        super().__init__()
        self.conv1 = Conv2d(inplanes, planes, 3, stride, 1, bias=no_batch_norm)
        self.bn1 = _norm(planes, True, no_batch_norm)
        self.conv2 = Conv2d(planes, planes, 3, 1, 1, bias=no_batch_norm)
        self.bn2 = _norm(planes, True, no_batch_norm)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(Conv2d(inplanes, planes, 1, stride, bias=no_batch_norm),
                                            _norm(planes, False, no_batch_norm))

    def forward(self, x):
        x, x2 = x if isinstance(x, tuple) else (x, x)
        if self.downsample is not None:  # the shortcut's convolution runs first, then the main path
            conv, norm = self.downsample
            shortcut = conv.forward_subsampled(x2) if x2.shape[-2:] != x.shape[-2:] else conv(x2)
        out = self.conv2(self.bn1(self.conv1(x)))
        if self.downsample is None:
            return self.bn2(out, x2)
        if isinstance(self.bn2, BatchNormAct2d) and self.bn2.pairs_with(norm):  # one apply normalises both
            return self.bn2.forward_with_shortcut(out, shortcut, norm)
        return self.bn2(out, norm(shortcut))


class ResNet(nn.Module):
    """CIFAR ResNet: 3x3 stem (64 channels, stride 1, no max-pool), four stages of BasicBlocks
    (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pool, linear classifier."""

    def __init__(self, layers=(2, 2, 2, 2), num_classes: int = 10, no_batch_norm: bool = False,
                 backend: str = "eager", widths=WIDTHS) -> None:
        super().__init__()
        self.no_batch_norm = no_batch_norm
        self.conv1 = Conv2d(3, widths[0], 3, 1, 1, bias=no_batch_norm)
        self.bn1 = _norm(widths[0], True, no_batch_norm)
        inplanes = widths[0]
        for i, (blocks, planes) in enumerate(zip(layers, widths)):
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(inplanes, planes, (1 if i == 0 else 2) if b == 0 else 1, no_batch_norm))
                inplanes = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(inplanes, num_classes)
        # on the triton backends: every batch norm's counter incremented and (under autocast) every cuDNN
        # convolution's weight cast in one launch each per forward; False: each layer does its own
        self.one_launch_prologue = True
        # with the one-launch prologue under autocast: the cast weights' gradients stay in the autocast dtype
        # (their grad_dtype), as the convolutions make them, instead of a cast back to fp32; for an optimizer
        # that reads them so (triton_kernels.sgd.SGD; torch's optimizers want a parameter's own dtype)
        self.low_precision_grads = False
        self._grad_dtype = None  # the grad_dtype the prologue last gave the cast weights (None: their own)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        self.set_backend(backend)

    def set_backend(self, backend: str) -> "ResNet":
        """Switch every layer to a backend's kernels (the "+compile" wrapping is :func:`compile_model`'s)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if getattr(self, "_cast_convs", None) is not None:
            self._set_grad_dtype(None)  # the weights cast until now take fp32 gradients again
        self.backend = backend
        self.fused = backend.startswith("triton")
        for m in self.modules():
            if isinstance(m, BatchNormAct2d):
                m.fused = self.fused
            if isinstance(m, Conv2d):
                m.impl = choose_conv(m, backend)
        self._norms = [m for m in self.modules() if isinstance(m, BatchNormAct2d)]
        # the batch norms whose output a block uses twice (conv1 and the shortcut): the stem's and every
        # block's last but the network's last
        blocks = [m for m in self.modules() if isinstance(m, BasicBlock)]
        feeding = [self.bn1] + [b.bn2 for b in blocks[:-1]]
        for m in self._norms:
            m.two_outputs = self.fused and any(m is f for f in feeding)
            m.second_stride = 1
        # a block whose shortcut reads one pixel in s x s: the batch norm feeding it hands it that subsample
        for f, block in zip(feeding, blocks):
            if self.fused and block.downsample is not None and isinstance(f, BatchNormAct2d):
                f.second_stride = block.downsample[0].reads_one_in()
        # the convs whose weights the prologue casts: cuDNN's, and the Triton ones whose kernel reads a
        # channels_last weight in x's dtype as it is (the transposed kernel's: C_in >= TRANSPOSED_MIN_C); the
        # flat-K stem packs (and so casts) its own
        self._cast_convs = [m for m in self.modules() if isinstance(m, Conv2d) and (
            m.impl == "cudnn" or m.in_channels >= _conv2d.TRANSPOSED_MIN_C)]
        return self

    @contextlib.contextmanager
    def _prologue(self, x: torch.Tensor) -> Iterator[None]:
        """What every layer would launch for itself, in one launch each, on the triton backends (eager calls
        and CUDA graphs; torch.compile fuses these itself): the training-mode num_batches_tracked increments
        (layers with a momentum; momentum=None reads the counter on the host, so it counts for itself), and
        under autocast the fp32 weights of the convolutions in _cast_convs cast to the autocast dtype
        (foreach_cast.cast_parameters, whose backward casts their gradients back in one launch too)."""
        if not (self.fused and self.one_launch_prologue) or torch.compiler.is_compiling():
            self._set_grad_dtype(None)
            yield
            return
        counted = [m for m in self._norms if m.training and m.track_running_stats
                   and m.num_batches_tracked is not None and m.momentum is not None]
        convs = []
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            convs = [m for m in self._cast_convs if m.weight.dtype == torch.float32 != dtype]
        self._set_grad_dtype(dtype if convs and self.low_precision_grads else None)
        try:
            if counted:
                torch._foreach_add_([m.num_batches_tracked for m in counted], 1)
                for m in counted:
                    _set_plain(m, "counted", True)
            if convs:
                for m, w in zip(convs, foreach_cast.cast_parameters([m.weight for m in convs], dtype)):
                    _set_plain(m, "cast_weight", w)
            yield
        finally:
            for m in counted:
                _set_plain(m, "counted", False)
            for m in convs:
                _set_plain(m, "cast_weight", None)

    def _set_grad_dtype(self, dtype: torch.dtype | None) -> None:
        """The cast weights' gradients kept in ``dtype`` (their grad_dtype), or None: in their own dtype again
        (so a step without autocast, or compiled, keeps fp32 gradients). A gradient already there (not set to
        None between steps) is converted with it: widened exactly, or rounded as the step's own would be."""
        if dtype is self._grad_dtype:
            return
        for m in self._cast_convs:
            w = m.weight
            want, grad = w.dtype if dtype is None else dtype, w.grad
            if grad is not None and grad.dtype != want:
                w.grad = None  # torch refuses a grad_dtype that the gradient there does not have
                w.grad_dtype = want
                w.grad = grad.to(want)
            else:
                w.grad_dtype = want
        self._grad_dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self._prologue(x):
            x = self.bn1(self.conv1(x))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            if self.fused:
                return _pool_head.pool_head(x, self.fc.weight, self.fc.bias)
            return self.fc(torch.flatten(functional.adaptive_avg_pool2d(x, 1), 1))


def resnet(name: str = "resnet18", num_classes: int = 10, no_batch_norm: bool = False, backend: str = "eager",
           widths=WIDTHS) -> ResNet:
    """ResNet-18 or ResNet-34 (``name``), CIFAR variant; ``widths`` shrinks it for tests."""
    if name not in LAYERS:
        raise ValueError(f"name must be one of {tuple(LAYERS)}, got {name!r}")
    return ResNet(LAYERS[name], num_classes, no_batch_norm, backend, widths)


def resnet18(**kwargs) -> ResNet:
    return resnet("resnet18", **kwargs)


def resnet34(**kwargs) -> ResNet:
    return resnet("resnet34", **kwargs)


def compile_model(model: ResNet, **compile_kwargs) -> Callable:
    """The callable that runs ``model`` on its backend: torch.compile(model) for the "+compile" kinds
    ("compile" compiles the eager layers), else the model itself."""
    if model.backend in ("compile", "triton+compile"):
        return torch.compile(model, **compile_kwargs)
    return model


# --------------------------------------------------------------------------------------------------
# Inference: BatchNorm folded into the convolutions
# --------------------------------------------------------------------------------------------------
def _fold_pair(conv: nn.Conv2d, bn: nn.Module) -> nn.Module:
    if not isinstance(bn, BatchNormAct2d):
        return bn
    w, b = batchnorm.fold_into_conv(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
    conv.weight = nn.Parameter(w)
    conv.bias = nn.Parameter(b)
    return AddAct(bn.relu)


def fold_batch_norms(model: ResNet) -> ResNet:
    """An inference copy of ``model`` (eval mode) with every BatchNorm folded into the convolution before
    it (running statistics); the relu and residual adds stay."""
    folded = copy.deepcopy(model).eval()
    folded.bn1 = _fold_pair(folded.conv1, folded.bn1)
    for m in folded.modules():
        if isinstance(m, BasicBlock):
            m.bn1 = _fold_pair(m.conv1, m.bn1)
            m.bn2 = _fold_pair(m.conv2, m.bn2)
            if m.downsample is not None:
                m.downsample[1] = _fold_pair(m.downsample[0], m.downsample[1])
    return folded.set_backend(folded.backend)
