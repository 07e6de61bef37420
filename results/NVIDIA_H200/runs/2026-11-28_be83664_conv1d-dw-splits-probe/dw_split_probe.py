"""conv1d's TMA weight gradient (d48cbcd's `_conv1d_dw_tma_kernel`) at 1, 2 and 4 waves of programs (fewer splits:
fewer fp32 partials to write and read back), its partials summed by torch and copied to the weight's layout (the
production path) or by conv2d's `_sum_partials_kernel` straight into the weight's layout and dtype (one launch);
kernel time (lead spin 0.3 ms, L2 flushed), errors against float64; Char-CNN training shapes, bf16, batch 128."""
import statistics

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_kernels import conv1d
from triton_kernels.conv2d_kernels import _sum_partials_kernel
from triton_kernels.runtime import cuda_time_ms, num_sms


def med(fn, lead=0.3, rep=40):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))


def partials(x, dz, k, cfg, waves):
    B, L, C = x.shape
    L_out, N = dz.shape[1], dz.shape[2]
    bc, bn, bm, warps, stages = cfg
    tiles = triton.cdiv(C, bc) * triton.cdiv(N, bn)
    l_blocks = triton.cdiv(L_out, bm)
    steps = B * l_blocks
    per_split = triton.cdiv(steps, max(1, min(steps, triton.cdiv(waves * num_sms(dz.device), tiles * k))))
    splits = triton.cdiv(steps, per_split)
    part = torch.empty((splits, k, C, N), device=dz.device, dtype=torch.float32)
    conv1d._conv1d_dw_tma_kernel[(tiles, k, splits)](
        TensorDescriptor(x, [B * L, C], [x.stride(1), 1], [bm, bc]),
        TensorDescriptor(dz, [B, L_out, N], [dz.stride(0), dz.stride(1), 1], [1, bm, bn]),
        part, C, N, L, l_blocks, steps, per_split, KSIZE=k, PRECISION="ieee", BLOCK_C=bc, BLOCK_N=bn, BLOCK_M=bm,
        num_warps=warps, num_stages=stages)
    return part


def reduce_into(part, out):
    S, k, C, N = part.shape
    swn, swc, swt = out.stride()
    _sum_partials_kernel[(triton.cdiv(out.numel(), 32),)](part, out, S, N, k * C * N, swn, swc, 0, swt, C_IN=C, KH=1,
                                                          KW=k, BLOCK_S=64, BLOCK_J=32, num_warps=4)
    return out


CONFIGS = [(128, 128, 32, 4, 5), (128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4)]
for B, L, C, N, k in ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)):
    tag = f"B{B} L{L} k{k}"
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, L, C, device="cuda", generator=g).bfloat16()
    dz = torch.randn(B, L - k + 1, N, device="cuda", generator=g).bfloat16()
    w = conv1d.pack_weight(torch.randn(N, C, k, device="cuda", generator=g).bfloat16())
    ref = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), (N, C, k), dz.double().transpose(1, 2))
    scale = ref.abs().max().item()
    prod = lambda: conv1d.grad_like(w, conv1d.conv1d_weight_grad(x, dz, k, C, path="tma"))
    print(f"{tag} production tma + grad_like: err {(prod().double() - ref).abs().max().item() / scale:.1e}, "
          f"{med(prod):.4f} ms", flush=True)
    for cfg in CONFIGS:
        for waves in (1, 2, 4):
            part = partials(x, dz, k, cfg, waves)
            out = torch.empty_like(w)
            err = (reduce_into(part, out).double() - ref).abs().max().item() / scale
            t_part = med(lambda: partials(x, dz, k, cfg, waves))
            t_sum = med(lambda: conv1d.grad_like(w, part.sum(0)))
            t_red = med(lambda: reduce_into(part, out))
            t_all = med(lambda: reduce_into(partials(x, dz, k, cfg, waves), out))
            print(f"{tag} {cfg} waves {waves} splits {part.shape[0]}: partials {t_part:.4f}, torch sum + copy "
                  f"{t_sum:.4f}, _sum_partials_kernel {t_red:.4f} (err {err:.1e}), partials + kernel {t_all:.4f} ms",
                  flush=True)
