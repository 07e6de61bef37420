"""conv2d cases: the Triton implicit GEMM (triton_kernels/conv2d.py) vs torch's functional.conv2d (cuDNN on
a GPU; and torch.compile, added by the harness), at every ResNet-18 CIFAR conv shape, batch 512,
channels_last, bf16.

conv2d_fwd:               y = conv2d(x, w) (ResNet's convs have no bias: batch norm follows)
                          FLOPs = 2 B H_out W_out C_out C_in KH KW
                          bytes = read x + w, write y
conv2d_bias_add_relu_fwd: y = relu(conv2d(x, w) + b + residual) (eager: conv2d with bias, then torch's
                          add and relu; Triton: one kernel with the epilogue fused)
                          FLOPs = the conv's + 2 per output value (the relu is not counted)
                          bytes = read x + w + b + residual, write y
conv2d_fwdbwd:            y = conv2d(x, w) and the weight's gradient dw (x needs none: a network's stem, which
                          reads the data), at the shapes that take the flat-K kernels (few input channels)
                          FLOPs = twice the forward's
                          bytes = the forward's + read x + dy + w, write dw
cuDNN runs with ``torch.backends.cudnn.benchmark`` on (set by the cases), as in bench.resnet. An fp32 case
names its precision ("ieee" or "tf32"): cuDNN's TF32 is set to match, and ours is called with it.
Both backends get the same x (channels_last) and the same weight (channels_last, as
``model.to(memory_format=torch.channels_last)`` leaves a conv's weight). The Triton call packs the weight
to (KH, KW, C_in, C_out) once and reuses the copy while the weight is unchanged, so these rows time the
steady state of inference; in training the weight changes every step and the pack (one read and one
write of the weight) is paid once per step per layer.
"""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels import conv2d

from ..harness import Case

# (C_in, H, W, C_out, kernel, stride): ResNet-18 CIFAR's distinct convolutions (padding 1 for 3x3, 0 for 1x1)
RESNET18_SHAPES = [
    (3, 32, 32, 64, 3, 1),      # stem
    (64, 32, 32, 64, 3, 1),     # layer1
    (64, 32, 32, 128, 3, 2),    # layer2.0.conv1
    (64, 32, 32, 128, 1, 2),    # layer2.0.downsample
    (128, 16, 16, 128, 3, 1),   # layer2
    (128, 16, 16, 256, 3, 2),   # layer3.0.conv1
    (128, 16, 16, 256, 1, 2),   # layer3.0.downsample
    (256, 8, 8, 256, 3, 1),     # layer3
    (256, 8, 8, 512, 3, 2),     # layer4.0.conv1
    (256, 8, 8, 512, 1, 2),     # layer4.0.downsample
    (512, 4, 4, 512, 3, 1),     # layer4
]


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def conv2d_case(B: int, C: int, H: int, W: int, N: int, k: int, stride: int, dtype: torch.dtype,
                fused: bool = False, backward: bool = False, precision: str = "ieee") -> Case:
    pad = k // 2
    precision = precision if dtype == torch.float32 else "ieee"
    H_out, W_out = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1

    def inputs(seed, device):
        # cuDNN picks its algorithm by timing the candidates, as in bench.resnet (its heuristic choice
        # took 0.20 ms for the 1x1 stride-2 64 -> 128 layer on an H100)
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        g = torch.Generator(device=device).manual_seed(seed)
        cl = torch.channels_last
        x = torch.randn(B, C, H, W, device=device, generator=g).to(dtype).contiguous(memory_format=cl)
        w = (torch.randn(N, C, k, k, device=device, generator=g) / (C * k * k) ** 0.5).to(dtype)
        w = w.contiguous(memory_format=cl)
        if backward:
            gy = torch.randn(B, N, H_out, W_out, device=device, generator=g).to(dtype).contiguous(memory_format=cl)
            return x, w.requires_grad_(), gy
        if not fused:
            return x, w
        b = torch.randn(N, device=device, generator=g).to(dtype)
        res = torch.randn(B, N, H_out, W_out, device=device, generator=g).to(dtype).contiguous(memory_format=cl)
        return x, w, b, res

    def eager(x, w, b=None, res=None):
        if backward:  # the third input is dy
            y = functional.conv2d(x, w, None, stride, pad)
            return (y, *torch.autograd.grad(y, w, b))
        y = functional.conv2d(x, w, b, stride, pad)
        return y if res is None else functional.relu(y + res)

    def ours(x, w, b=None, res=None):
        if backward:  # the third input is dy
            y = conv2d.conv2d(x, w, None, stride, pad, precision=precision)
            return (y, *torch.autograd.grad(y, w, b))
        with torch.no_grad():
            return conv2d.conv2d(x, w, b, stride, pad, residual=res, activation="relu" if fused else "none",
                                 precision=precision)

    def reference(x, w, b=None, res=None):
        if backward:
            w64 = w.detach().double().requires_grad_()
            with torch.enable_grad():
                y = functional.conv2d(x.double(), w64, None, stride, pad)
                return (y.detach(), *torch.autograd.grad(y, w64, b.double()))
        y = functional.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, pad)
        return y if res is None else functional.relu(y + res.double())

    es = _es(dtype)
    out = B * N * H_out * W_out
    flops = (2.0 * out * C * k * k) * (2 if backward else 1) + (2.0 * out if fused else 0.0)
    moved = es * (B * C * H * W + N * C * k * k + out * (2 if fused else 1) + (N if fused else 0))
    if backward:
        moved += es * (B * C * H * W + out + 2 * N * C * k * k)
    name = "conv2d_fwdbwd" if backward else "conv2d_bias_add_relu_fwd" if fused else "conv2d_fwd"
    params = {"B": B, "C_in": C, "H": H, "W": W, "C_out": N, "k": k, "stride": stride, "pad": pad,
              "layout": "channels_last"}
    if dtype == torch.float32:
        params["precision"] = precision
    return Case(suite="ops", name=name, params=params,
                dtype=dtype, inputs=inputs, fns={"eager": eager, "triton": ours}, reference=reference,
                flops=flops, bytes=float(moved), backward=backward, tf32=precision == "tf32")


def cases(quick: bool = False, dtypes=None, shapes=None, tiny=None, **_) -> list[Case]:
    """shapes: B x C_in x H x W x C_out x k x stride (forward, no epilogue). tiny: interpreter sizes
    (default: in the CPU interpreter). quick: the stem, one shape per stage and one 1x1 shortcut."""
    from . import is_tiny, keep_dtypes, of_rank, shape_dtypes

    f32, bf16 = torch.float32, torch.bfloat16
    if shapes:
        return [conv2d_case(*s, dt) for s in of_rank(shapes, 7) for dt in shape_dtypes(dtypes)]
    if is_tiny(tiny):
        return keep_dtypes((conv2d_case(2, 3, 6, 6, 8, 3, 1, f32), conv2d_case(2, 8, 6, 6, 16, 1, 2, f32),
                            conv2d_case(2, 8, 5, 5, 12, 3, 2, f32, fused=True),
                            conv2d_case(2, 3, 6, 6, 8, 3, 1, f32, backward=True)), dtypes)
    chosen = RESNET18_SHAPES if not quick else [RESNET18_SHAPES[i] for i in (0, 1, 3, 4, 7, 10)]
    out = [conv2d_case(512, *s, bf16) for s in chosen]
    if not quick:  # the block's second conv with its epilogue (bias, shortcut, ReLU) fused, per stage
        out += [conv2d_case(512, C, H, W, N, k, s, bf16, fused=True)
                for C, H, W, N, k, s in RESNET18_SHAPES if k == 3 and s == 1 and C == N]
        # fp32, as a user who does not ask for bf16 calls it: cuDNN's default (TF32) and exact fp32
        out += [conv2d_case(512, *RESNET18_SHAPES[i], f32, precision=p) for i in (1, 7) for p in ("tf32", "ieee")]
    # forward + weight gradient where the flat-K kernels serve the layer (the stem)
    out += [conv2d_case(512, C, H, W, N, k, s, bf16, backward=True)
            for C, H, W, N, k, s in chosen if conv2d.uses_flat(C, k, k)]
    return keep_dtypes(out, dtypes)
