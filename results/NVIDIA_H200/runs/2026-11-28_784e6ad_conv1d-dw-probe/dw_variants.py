"""Weight-gradient kernels of conv1d that need no zero-padded dz (each sample's rows in BLOCK_M blocks; dz's rows
past L_out are zeros): (a) x and dz through 3-D TMA descriptors (per-dimension bounds zero-fill the tails), (b) x
through a 2-D descriptor over (B*L, C) and dz through a 3-D one, (c) x through a 2-D descriptor, dz loaded by
pointers and masked in registers (the dot's A operand, dz^T). Against the flat kernel on a padded dz (the ideal) and
the production pointer kernel: correctness against float64 and kernel time (lead spin 0.3 ms, L2 flushed)."""
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, ".runs50")
from conv1d_dw_probe import dw_flat, dw_prod_kernel_only, med, ON_GPU, DEV  # noqa: E402
from triton_kernels import conv1d  # noqa: E402
from triton_kernels.runtime import num_sms  # noqa: E402


@triton.jit
def _store_part(part_ptr, acc, s, t, pid_c, pid_n, C, N, KSIZE: tl.constexpr, BLOCK_C: tl.constexpr,
                BLOCK_N: tl.constexpr):
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    part = part_ptr + ((s * KSIZE + t) * C).to(tl.int64) * N
    tl.store(part + offs_c[:, None] * N + offs_n[None, :], acc, mask=(offs_c < C)[:, None] & (offs_n < N)[None, :])


@triton.jit
def dw_a_kernel(x_desc, dz_desc, part_ptr, C, N, L_BLOCKS, STEPS, SPS,
                KSIZE: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for j in range(s * SPS, tl.minimum(s * SPS + SPS, STEPS)):
        b = j // L_BLOCKS
        l0 = (j - b * L_BLOCKS) * BLOCK_M
        xa = x_desc.load([b, l0 + t, pid_c * BLOCK_C]).reshape(BLOCK_M, BLOCK_C)
        dz = dz_desc.load([b, l0, pid_n * BLOCK_N]).reshape(BLOCK_M, BLOCK_N)
        acc = tl.dot(tl.trans(xa), dz, acc)
    _store_part(part_ptr, acc, s, t, pid_c, pid_n, C, N, KSIZE, BLOCK_C, BLOCK_N)


@triton.jit
def dw_b_kernel(x_desc, dz_desc, part_ptr, C, N, L, L_BLOCKS, STEPS, SPS,
                KSIZE: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for j in range(s * SPS, tl.minimum(s * SPS + SPS, STEPS)):
        b = j // L_BLOCKS
        l0 = (j - b * L_BLOCKS) * BLOCK_M
        xa = x_desc.load([b * L + l0 + t, pid_c * BLOCK_C])
        dz = dz_desc.load([b, l0, pid_n * BLOCK_N]).reshape(BLOCK_M, BLOCK_N)
        acc = tl.dot(tl.trans(xa), dz, acc)
    _store_part(part_ptr, acc, s, t, pid_c, pid_n, C, N, KSIZE, BLOCK_C, BLOCK_N)


@triton.jit
def dw_c_kernel(x_desc, dz_ptr, part_ptr, C, N, L, L_out, L_BLOCKS, STEPS, SPS, stride_zb, stride_zl,
                KSIZE: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """acc[n, c] = sum_m dz^T[n, m] x[m, c] (dz^T, masked, the register A operand); stored transposed."""
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N, BLOCK_C), dtype=tl.float32)
    for j in range(s * SPS, tl.minimum(s * SPS + SPS, STEPS)):
        b = j // L_BLOCKS
        l0 = (j - b * L_BLOCKS) * BLOCK_M
        xa = x_desc.load([b * L + l0 + t, pid_c * BLOCK_C])
        l = l0 + tl.arange(0, BLOCK_M)
        dzt = tl.load(dz_ptr + b.to(tl.int64) * stride_zb + l[None, :] * stride_zl + offs_n[:, None],
                      mask=(l < L_out)[None, :] & (offs_n < N)[:, None], other=0.0)
        acc = tl.dot(dzt, xa, acc)
    _store_part(part_ptr, tl.trans(acc), s, t, pid_c, pid_n, C, N, KSIZE, BLOCK_C, BLOCK_N)


def dw_variant(which, x_cl, dz, k, cfg, splits_factor=4):
    B, L, C = x_cl.shape
    L_out, N = dz.shape[1], dz.shape[2]
    bc, bn, bm, warps, stages = cfg
    tiles = triton.cdiv(C, bc) * triton.cdiv(N, bn)
    lb = triton.cdiv(L_out, bm)
    steps = B * lb
    splits = max(1, min(steps, triton.cdiv(splits_factor * num_sms(x_cl.device, default=2), tiles * k)))
    sps = triton.cdiv(steps, splits)
    splits = triton.cdiv(steps, sps)
    part = torch.empty((splits, k, C, N), device=x_cl.device, dtype=torch.float32)
    opts = dict(KSIZE=k, BLOCK_C=bc, BLOCK_N=bn, BLOCK_M=bm, num_warps=warps, num_stages=stages)
    grid = (tiles, k, splits)
    x2 = TensorDescriptor(x_cl.view(B * L, C), [B * L, C], [C, 1], [bm, bc])
    if which == "a":
        x3 = TensorDescriptor(x_cl, [B, L, C], [L * C, C, 1], [1, bm, bc])
        z3 = TensorDescriptor(dz, [B, L_out, N], [L_out * N, N, 1], [1, bm, bn])
        dw_a_kernel[grid](x3, z3, part, C, N, lb, steps, sps, **opts)
    elif which == "b":
        z3 = TensorDescriptor(dz, [B, L_out, N], [L_out * N, N, 1], [1, bm, bn])
        dw_b_kernel[grid](x2, z3, part, C, N, L, lb, steps, sps, **opts)
    else:
        dw_c_kernel[grid](x2, dz, part, C, N, L, L_out, lb, steps, sps, dz.stride(0), dz.stride(1), **opts)
    return part


CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 32, 8, 4), (128, 128, 32, 4, 5),
           (128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4)]


def main():
    shapes = ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)) if ON_GPU else ((3, 13, 32, 32, 3),)
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    for B, L, C, N, k in shapes:
        L_out = L - k + 1
        tag = f"B{B} L{L} k{k}"
        g = torch.Generator(device=DEV).manual_seed(1)
        x_cl = torch.randn(B, L, C, device=DEV, generator=g).to(dtype)
        dz = torch.randn(B, L_out, N, device=DEV, generator=g).to(dtype)
        full = torch.stack([torch.einsum("blc,bln->cn", x_cl[:, t:t + L_out].double(), dz.double()) for t in range(k)])
        scale = full.abs().max().item()
        for which in "abc":
            for cfg in CONFIGS if ON_GPU else [(32, 32, 16, 4, 1)]:
                try:
                    err = (dw_variant(which, x_cl, dz, k, cfg).sum(0).double() - full).abs().max().item() / scale
                    t_ms = med(lambda: dw_variant(which, x_cl, dz, k, cfg), 0.3) if ON_GPU else float("nan")
                    print(f"{tag} variant {which} {cfg} rel err {err:.2e} kernel {t_ms:.4f} ms", flush=True)
                except Exception as e:
                    print(f"{tag} variant {which} {cfg} {type(e).__name__}: {str(e)[:300]}", flush=True)
        if ON_GPU:
            dz_pad = torch.zeros(B, L, N, device=DEV, dtype=dtype)
            dz_pad[:, :L_out] = dz
            for cfg in ((128, 128, 64, 8, 3), (64, 128, 64, 4, 4)):
                print(f"{tag} flat (padded dz) {cfg} kernel {med(lambda: dw_flat(x_cl, dz_pad, k, cfg), 0.3):.4f} ms")
            for cfg in conv1d.DW_CONFIGS[:2] + conv1d.DW_CONFIGS[5:6]:
                print(f"{tag} production {cfg.kwargs} kernel {med(lambda: dw_prod_kernel_only(x_cl, dz, k, cfg), 0.3):.4f} ms")


if __name__ == "__main__":
    main()
