"""conv1d's TMA weight gradient with the split-K sum fused (the last split of each (tile, tap) to arrive adds the
partials in split order and stores dw in the weight's layout and dtype) at several split counts (the grid filling
the GPU 1, 2 or 4 times over), against the production TMA kernel (partials summed by torch, then copied to the
weight's layout) and the pointer kernel: correctness against float64, kernel time (lead spin 0.3 ms, L2 flushed),
Char-CNN training shapes (bf16, batch 128). A fused variant at 4 waves measured 0.1136 ms against 0.0908 unfused
at L 336 (this session's 4th call): the tail reads 19 partial tiles from one SM per (tile, tap)."""
import statistics

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_kernels import conv1d
from triton_kernels.runtime import cuda_time_ms, num_sms
from triton_kernels.stream_buffers import last_arrival, stream_buffers


def med(fn, lead, rep=40):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))


@triton.jit
def dw_fused_kernel(x_desc, dz_desc, part_ptr, count_ptr, dw_ptr, C, N, L, L_BLOCKS, STEPS, STEPS_PER_SPLIT,
                    stride_wn, stride_wc, stride_wt, KSIZE: tl.constexpr, BLOCK_C: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for j in range(s * STEPS_PER_SPLIT, tl.minimum(s * STEPS_PER_SPLIT + STEPS_PER_SPLIT, STEPS)):
        b = j // L_BLOCKS
        l0 = (j - b * L_BLOCKS) * BLOCK_M
        xa = x_desc.load([b * L + l0 + t, pid_c * BLOCK_C])
        dz = dz_desc.load([b, l0, pid_n * BLOCK_N]).reshape(BLOCK_M, BLOCK_N)
        acc = tl.dot(tl.trans(xa), dz, acc)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_c < C)[:, None] & (offs_n < N)[None, :]
    tile = offs_c[:, None] * N + offs_n[None, :]
    splits = tl.num_programs(2)
    if splits == 1:
        dw = dw_ptr + offs_n[None, :] * stride_wn + offs_c[:, None] * stride_wc + t * stride_wt
        tl.store(dw, acc.to(dw_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(part_ptr + ((s * KSIZE + t) * C).to(tl.int64) * N + tile, acc, mask=mask)
        if last_arrival(count_ptr + tl.program_id(0) * KSIZE, splits):
            total = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
            for s2 in range(0, splits):
                total += tl.load(part_ptr + ((s2 * KSIZE + t) * C).to(tl.int64) * N + tile, mask=mask, other=0.0,
                                 cache_modifier=".cg")
            dw = dw_ptr + offs_n[None, :] * stride_wn + offs_c[:, None] * stride_wc + t * stride_wt
            tl.store(dw, total.to(dw_ptr.dtype.element_ty), mask=mask)


def dw_fused(x, dz, k, out, cfg, waves):
    B, L, C = x.shape
    L_out, N = dz.shape[1], dz.shape[2]
    bc, bn, bm, warps, stages = cfg
    tiles = triton.cdiv(C, bc) * triton.cdiv(N, bn)
    l_blocks = triton.cdiv(L_out, bm)
    steps = B * l_blocks
    per_split = triton.cdiv(steps, max(1, min(steps, triton.cdiv(waves * num_sms(dz.device), tiles * k))))
    splits = triton.cdiv(steps, per_split)
    part, counters, _ = stream_buffers(dz, splits * k * C * N, tiles * k)
    dw_fused_kernel[(tiles, k, splits)](
        TensorDescriptor(x, [B * L, C], [x.stride(1), 1], [bm, bc]),
        TensorDescriptor(dz, [B, L_out, N], [dz.stride(0), dz.stride(1), 1], [1, bm, bn]),
        part, counters, out, C, N, L, l_blocks, steps, per_split, *out.stride(), KSIZE=k, BLOCK_C=bc, BLOCK_N=bn,
        BLOCK_M=bm, num_warps=warps, num_stages=stages)
    return out, splits


CONFIGS = [(128, 128, 32, 4, 5), (128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4),
           (128, 64, 64, 4, 4)]

for B, L, C, N, k in ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)):
    L_out = L - k + 1
    tag = f"B{B} L{L} k{k}"
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, L, C, device="cuda", generator=g).bfloat16()
    dz = torch.randn(B, L_out, N, device="cuda", generator=g).bfloat16()
    w = conv1d.pack_weight(torch.randn(N, C, k, device="cuda", generator=g).bfloat16())
    ref = torch.nn.grad.conv1d_weight(x.double().transpose(1, 2), (N, C, k), dz.double().transpose(1, 2))
    scale = ref.abs().max().item()
    for path in ("tma", "pointer"):
        fn = lambda: conv1d.grad_like(w, conv1d.conv1d_weight_grad(x, dz, k, C, path=path))
        err = (fn().double() - ref).abs().max().item() / scale
        print(f"{tag} production {path:8s} (+ grad_like) err {err:.1e} kernel {med(fn, 0.3):.4f} ms", flush=True)
    for cfg in CONFIGS:
        for waves in (1, 2, 4):
            out = torch.empty_like(w)
            try:
                _, splits = dw_fused(x, dz, k, out, cfg, waves)
                err = (out.double() - ref).abs().max().item() / scale
                t_ms = med(lambda: dw_fused(x, dz, k, out, cfg, waves), 0.3)
                print(f"{tag} fused {cfg} waves {waves} splits {splits} err {err:.1e} kernel {t_ms:.4f} ms", flush=True)
            except Exception as e:
                print(f"{tag} fused {cfg} waves {waves} {type(e).__name__}: {str(e)[:200]}", flush=True)
