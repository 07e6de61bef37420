"""conv1d cases: Triton (channels-last implicit GEMM, gather first layer) vs eager functional.conv1d (and
torch.compile, added by the harness), at the Char-CNN shapes.

conv1d_fwd:        max_pool1d(relu(conv1d(x, w) + b), pool)     FLOPs = 2 B L_out C_out C_in k
                                                                bytes = read x + w + b, write y
conv1d_fwdbwd:     y and dx, dw, db (pool 1)                    FLOPs = 3 x the forward's
                                                                bytes = the forward's + read dy, x, w + write dx, dw
conv1d_gather:     first layer: conv1d over the one-hot of character indices (eager: the dense one-hot conv;
                   Triton: the gather-sum from uint8 indices)  FLOPs = B L_out C_out k (the gather's adds)
                                                                bytes = read indices + w, write y
gather_ln_relu_pool: the fused first block, relu(max_pool1d(layer_norm(conv1(x)))) (Triton: statistics and
                   normalise-pool passes both recompute the gather; the conv output never reaches memory)
                                                                bytes = read indices + w + LayerNorm params, write y
Every backend gets the same data in its own layout (eager: channels-first x, dy and the one-hot; Triton:
channels-last x and dy, uint8 indices, weights laid out (k, C_in, C_out), or (C_out, k, C_in) for an fp32 forward at
tf32, as `conv1d.pack_weight` and the Char-CNN model pack them); outputs are compared channels-last.
"""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels import conv1d
from triton_kernels import conv1d_gather

from ..harness import Case


CUDNN_16BIT_BACKWARD_TOL = 5e-2


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def _pool_relu(z, activation, pool):
    z = functional.relu(z) if activation == "relu" else z
    return functional.max_pool1d(z, pool, pool) if pool > 1 else z


def conv1d_case(B: int, L: int, C: int, N: int, k: int, dtype: torch.dtype, pool: int = 1,
                activation: str = "relu", mode: str = "fwd", precision: str = "ieee") -> Case:
    L_out = L - k + 1
    precision = precision if dtype == torch.float32 else "ieee"

    def inputs(seed, device):
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(B, C, L, device=device, generator=g).to(dtype)
        w = (torch.randn(N, C, k, device=device, generator=g) / (C * k) ** 0.5).to(dtype)
        b = torch.randn(N, device=device, generator=g).to(dtype)
        # the forward's weight packed as the model's inference path packs it, at the case's precision
        x_cl, w_packed = x.transpose(1, 2).contiguous(), conv1d.pack_weight(w, precision if mode == "fwd" else "ieee")
        if mode == "fwd":
            return x, w, b, x_cl, w_packed
        dy = torch.randn(B, N, L_out, device=device, generator=g).to(dtype)
        leaves = [t.requires_grad_() for t in (x, w, b, x_cl, w_packed.detach())]
        return (*leaves, dy, dy.transpose(1, 2).contiguous())  # dy in each backend's layout

    if mode == "fwd":
        def eager(x, w, b, x_cl, w_packed):
            return _pool_relu(functional.conv1d(x, w, b), activation, pool).transpose(1, 2)

        def ours(x, w, b, x_cl, w_packed):
            with torch.no_grad():
                return conv1d.conv1d(x_cl, w_packed, b, activation, pool, precision)

        def reference(x, w, b, x_cl, w_packed):
            return _pool_relu(functional.conv1d(x.double(), w.double(), b.double()), activation, pool).transpose(1, 2)
    else:
        def eager(x, w, b, x_cl, w_packed, dy, dy_cl):
            y = _pool_relu(functional.conv1d(x, w, b), activation, 1)
            dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
            return y.transpose(1, 2), dx.transpose(1, 2), dw, db

        def ours(x, w, b, x_cl, w_packed, dy, dy_cl):
            y = conv1d.conv1d(x_cl, w_packed, b, activation, precision=precision)
            dx, dw, db = torch.autograd.grad(y, (x_cl, w_packed, b), dy_cl)
            return y, dx, dw, db

        def reference(x, w, b, x_cl, w_packed, dy, dy_cl):
            x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
            with torch.enable_grad():
                y = _pool_relu(functional.conv1d(x64, w64, b64), activation, 1)
                dx, dw, db = torch.autograd.grad(y, (x64, w64, b64), dy.double())
            return y.detach().transpose(1, 2), dx.transpose(1, 2), dw, db

    es = _es(dtype)
    flops = 2.0 * B * L_out * N * C * k
    fwd_bytes = es * (B * L * C + N * C * k + N + B * (L_out // pool) * N)
    moved = fwd_bytes if mode == "fwd" else 2 * fwd_bytes + es * (B * L_out * N + B * L * C + N * C * k)
    params = {"B": B, "L": L, "C_in": C, "C_out": N, "k": k, "pool": pool}
    if dtype == torch.float32:
        params["precision"] = precision
    # cuDNN's 16-bit conv1d backward (eager's and torch.compile's) is off by 2.7-3.1e-2 against float64 at the
    # Char-CNN shapes (dx, dw and db alike; ours 1.6-1.9e-3; results/NVIDIA_H200/runs/
    # 2026-11-28_c739c74_tests-group-11-conv1d-bwd-errors), over the 16-bit tolerance: the baseline a user
    # gets is timed all the same, under a wider one (the tests hold ours to the tight one)
    tol = CUDNN_16BIT_BACKWARD_TOL if mode != "fwd" and dtype != torch.float32 else None
    return Case(suite="ops", name=f"conv1d_{mode}", params=params, dtype=dtype, inputs=inputs,
                fns={"eager": eager, "triton": ours}, reference=reference,
                flops=flops if mode == "fwd" else 3 * flops, bytes=float(moved), backward=mode != "fwd",
                tf32=precision == "tf32", tol=tol)


def gather_case(B: int, L: int, C: int, N: int, k: int, dtype: torch.dtype, fused_ln: bool = False,
                pool: int = 3) -> Case:
    """The first layer from character indices (C = alphabet size; index C = no character)."""
    L_out = L - k + 1

    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        idx = torch.randint(0, C + 1, (B, L), device=device, generator=g).to(torch.uint8)
        one_hot = (idx.long()[:, None, :] == torch.arange(C, device=device)[None, :, None]).to(dtype)
        w = torch.randn(N, C, k, device=device, generator=g).to(dtype)
        b = torch.randn(N, device=device, generator=g).to(dtype)
        gain = torch.randn(N, L_out, device=device, generator=g).to(dtype)
        shift = torch.randn(N, L_out, device=device, generator=g).to(dtype)
        return idx, one_hot, w, conv1d.pack_weight(w), b, gain, shift

    def block(z, gain, shift):
        if not fused_ln:
            return z
        return functional.max_pool1d(functional.relu(functional.layer_norm(z, (N, L_out), gain, shift)), pool, pool)

    def eager(idx, one_hot, w, w_packed, b, gain, shift):
        return block(functional.conv1d(one_hot, w, b), gain, shift).transpose(1, 2)

    def ours(idx, one_hot, w, w_packed, b, gain, shift):
        with torch.no_grad():
            if fused_ln:
                return conv1d_gather.conv1d_gather_ln_relu_pool(idx, w_packed, b, gain, shift, pool=pool)
            return conv1d_gather.conv1d_gather(idx, w_packed, b)

    def reference(idx, one_hot, w, w_packed, b, gain, shift):
        z = functional.conv1d(one_hot.double(), w.double(), b.double())
        return block(z, gain.double(), shift.double()).transpose(1, 2)

    es = _es(dtype)
    out = B * N * (L_out // pool if fused_ln else L_out)
    moved = B * L + es * (N * C * k + N + out + (2 * N * L_out if fused_ln else 0))
    return Case(suite="ops", name="gather_ln_relu_pool" if fused_ln else "conv1d_gather",
                params={"B": B, "L": L, "C_in": C, "C_out": N, "k": k}, dtype=dtype, inputs=inputs,
                fns={"eager": eager, "triton": ours}, reference=reference, flops=float(B * L_out * N * k),
                bytes=float(moved))


def cases(quick: bool = False, dtypes=None, shapes=None, tiny=None, **_) -> list[Case]:
    """shapes: B x L x C_in x C_out x k (forward, pool 1). tiny: interpreter sizes (default: in the CPU
    interpreter)."""
    from . import is_tiny, keep_dtypes, of_rank, shape_dtypes

    f32, bf16 = torch.float32, torch.bfloat16
    if shapes:
        return [conv1d_case(*s, dt) for s in of_rank(shapes, 5) for dt in shape_dtypes(dtypes)]
    if is_tiny(tiny):
        return keep_dtypes((conv1d_case(2, 20, 8, 16, 7, f32, pool=3), conv1d_case(2, 12, 8, 8, 3, f32, mode="fwdbwd"),
                            gather_case(2, 40, 10, 16, 7, f32), gather_case(2, 40, 10, 16, 7, f32, fused_ln=True)),
                           dtypes)
    out = [conv1d_case(512, 336, 256, 256, 7, bf16, pool=3),      # Char-CNN conv2 (+ReLU+pool) at batch 512
           conv1d_case(512, 110, 256, 256, 3, bf16),              # conv3
           gather_case(512, 1014, 70, 256, 7, bf16, fused_ln=True)]  # block 1 fused
    if not quick:
        out += [conv1d_case(512, 336, 256, 256, 7, bf16),           # conv2 without the pool epilogue
                conv1d_case(512, 104, 256, 256, 3, bf16, activation="none"),  # conv6 (LayerNorm follows)
                gather_case(512, 1014, 70, 256, 7, bf16),           # conv1 alone (output stored)
                conv1d_case(128, 336, 256, 256, 7, bf16, mode="fwdbwd"),
                conv1d_case(128, 110, 256, 256, 3, bf16, mode="fwdbwd"),
                conv1d_case(512, 336, 256, 256, 7, f32, pool=3, precision="tf32"),  # cuDNN's fp32 default
                conv1d_case(512, 336, 256, 256, 7, f32, pool=3)]
    return keep_dtypes(out, dtypes)
