"""conv1d fwd+bwd at the Char-CNN training shapes (bf16, batch 128, C = N = 256): (1) an A/B in one process of the
eager fast path against the general path (the fast path's table cleared before each call) and of dy channels-last
against a strided view, against eager (cuDNN), in interleaved rounds; (2) the weight gradient's pieces (kernel per
config, the partials' sum, the copy to the weight's layout); (3) probe kernels for the weight gradient: a "flat" shifted
GEMM over the (B*L, C) rows of x and a dz zero-padded to L rows per sample, read through TMA descriptors (no index
arithmetic, no masks), and a fused reduce of the split-K partials into the weight's layout and dtype; (4) cProfile of
the fast path's fwd+bwd at L 110. Eager calls (lead 0) and kernel time (lead spin 0.3 ms), L2 flushed."""
import cProfile
import io
import os
import pstats
import statistics
import sys

import torch
import triton
import triton.language as tl
from torch.nn import functional
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_kernels import conv1d, conv1d_eager
from triton_kernels.runtime import cuda_time_ms, launch, num_sms

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"


def med(fn, lead, rep=40):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))


@triton.jit
def dw_flat_kernel(x_desc, dz_desc, part_ptr, C, N, ROWS_PER_SPLIT, R,
                   KSIZE: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """part[s, t, c, n] = sum_r x2d[r + t, c] * dzp2d[r, n] over the rows r of split s (dzp zero past L_out in each
    sample, so a row pair that crosses samples adds nothing; TMA zero-fills rows past the end)."""
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    start = s * ROWS_PER_SPLIT
    end = tl.minimum(start + ROWS_PER_SPLIT, R)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for r0 in range(start, end, BLOCK_M):
        xa = x_desc.load([r0 + t, pid_c * BLOCK_C])
        dz = dz_desc.load([r0, pid_n * BLOCK_N])
        acc = tl.dot(tl.trans(xa), dz, acc)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    part = part_ptr + ((s * KSIZE + t) * C).to(tl.int64) * N
    tl.store(part + offs_c[:, None] * N + offs_n[None, :], acc, mask=(offs_c < C)[:, None] & (offs_n < N)[None, :])


@triton.jit
def reduce_parts_kernel(part_ptr, dw_ptr, S, KC, C, N, stride_wn, stride_wc, stride_wt,
                        BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """dw[n, c, t] = sum_s part[s, t, c, n], stored in the weight's layout and dtype."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_r < KC)[:, None] & (offs_n < N)[None, :]
    ptrs = part_ptr + offs_r.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_R, BLOCK_N), dtype=tl.float32)
    for s in range(0, S):
        acc += tl.load(ptrs + s * KC * N, mask=mask, other=0.0)
    t = offs_r // C
    c = offs_r % C
    out = dw_ptr + (c * stride_wc + t * stride_wt)[:, None] + offs_n[None, :] * stride_wn
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=mask)


def dw_flat(x_cl, dz_pad, k, cfg, splits_factor=4):
    """part (S, k, C, N) from the flat TMA kernel: x_cl (B, L, C), dz_pad (B, L, N) dense."""
    B, L, C = x_cl.shape
    N = dz_pad.shape[2]
    R = B * L
    bc, bn, bm, warps, stages = cfg
    tiles = triton.cdiv(C, bc) * triton.cdiv(N, bn)
    splits = max(1, min(triton.cdiv(R, bm), triton.cdiv(splits_factor * num_sms(x_cl.device, default=2), tiles * k)))
    rows = triton.cdiv(triton.cdiv(R, splits), bm) * bm
    splits = triton.cdiv(R, rows)
    part = torch.empty((splits, k, C, N), device=x_cl.device, dtype=torch.float32)
    x_desc = TensorDescriptor(x_cl.view(R, C), [R, C], [C, 1], [bm, bc])
    dz_desc = TensorDescriptor(dz_pad.view(R, N), [R, N], [N, 1], [bm, bn])
    dw_flat_kernel[(tiles, k, splits)](x_desc, dz_desc, part, C, N, rows, R, KSIZE=k, BLOCK_C=bc, BLOCK_N=bn,
                                       BLOCK_M=bm, num_warps=warps, num_stages=stages)
    return part


def reduce_parts(part, weight):
    S, k, C, N = part.shape
    dw = torch.empty_like(weight)
    grid = (triton.cdiv(k * C, 32), triton.cdiv(N, 128))
    reduce_parts_kernel[grid](part, dw, S, k * C, C, N, *weight.stride(), BLOCK_R=32, BLOCK_N=128, num_warps=4)
    return dw


def dw_prod_kernel_only(x_cl, dz, k, cfg):
    """The production _conv1d_dw_kernel with one config, its partials (the launcher's split rule)."""
    B, L_out, N = dz.shape
    C = x_cl.shape[2]
    M = B * L_out
    bc, bn, bm = cfg.kwargs["BLOCK_C"], cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_M"]
    tiles = triton.cdiv(C, bc) * triton.cdiv(N, bn)
    splits = max(1, min(triton.cdiv(M, bm), triton.cdiv(4 * num_sms(dz.device, default=2), tiles * k)))
    rows = triton.cdiv(triton.cdiv(M, splits), bm) * bm
    splits = triton.cdiv(M, rows)
    part = torch.empty((splits, k, C, N), device=dz.device, dtype=torch.float32)
    sx = x_cl.stride()
    launch(conv1d._conv1d_dw_kernel, (tiles, k, splits), x_cl, dz, part, M=M, N=N, C=C, L_out=L_out,
           ROWS_PER_SPLIT=rows, stride_xb=sx[0], stride_xl=sx[1], stride_xc=sx[2], stride_zb=dz.stride(0),
           stride_zl=dz.stride(1), stride_zn=dz.stride(2), KSIZE=k, X_IS_INDEX=False, PRECISION="ieee",
           **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return part


FLAT_CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 128, 8, 3),
                (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4)]


def main():
    shapes = ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)) if ON_GPU else ((2, 13, 32, 32, 3),)
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    for B, L, C, N, k in shapes:
        L_out = L - k + 1
        tag = f"B{B} L{L} k{k}"
        g = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(B, C, L, device=DEV, generator=g).to(dtype).requires_grad_()
        w = (torch.randn(N, C, k, device=DEV, generator=g) / (C * k) ** 0.5).to(dtype).requires_grad_()
        b = torch.randn(N, device=DEV, generator=g).to(dtype).requires_grad_()
        dy = torch.randn(B, N, L_out, device=DEV, generator=g).to(dtype)
        x_cl = x.detach().transpose(1, 2).contiguous().requires_grad_()
        w_p = conv1d.pack_weight(w.detach(), "ieee").detach().requires_grad_()
        dy_view, dy_cl = dy.transpose(1, 2), dy.transpose(1, 2).contiguous()

        # correctness of the probe kernels against the production weight gradient and float64
        dz = dy_cl  # activation "none" for the kernel check
        ref = torch.einsum("blc,bln->cn", x_cl.detach()[:, :L_out].double(), dz.double())  # tap 0, a spot check
        prod = conv1d.conv1d_weight_grad(x_cl.detach(), dz, k, C, "ieee")
        print(f"{tag} prod dw tap0 max err {(prod[0].double() - ref).abs().max().item():.3e} "
              f"(max |ref| {ref.abs().max().item():.3e})", flush=True)
        dz_pad = torch.zeros(B, L, N, device=DEV, dtype=dtype)
        dz_pad[:, :L_out] = dz
        full = torch.stack([torch.einsum("blc,bln->cn", x_cl.detach()[:, t:t + L_out].double(), dz.double())
                            for t in range(k)])
        for cfg in FLAT_CONFIGS if ON_GPU else [(32, 32, 32, 4, 1)]:
            try:
                part = dw_flat(x_cl.detach(), dz_pad, k, cfg)
                err = (part.sum(0).double() - full).abs().max().item()
                dw = reduce_parts(part, w_p.detach())
                err2 = (dw.double() - full.permute(2, 1, 0)).abs().max().item()
                t_ms = med(lambda: dw_flat(x_cl.detach(), dz_pad, k, cfg), 0.3) if ON_GPU else float("nan")
                print(f"{tag} flat {cfg} splits {part.shape[0]} err {err:.3e} reduced err {err2:.3e} "
                      f"(max |ref| {full.abs().max().item():.3e}) kernel {t_ms:.4f} ms", flush=True)
            except Exception as e:
                print(f"{tag} flat {cfg} {type(e).__name__}: {str(e)[:300]}", flush=True)
        if ON_GPU:
            part = dw_flat(x_cl.detach(), dz_pad, k, FLAT_CONFIGS[0])
            print(f"{tag} reduce_parts kernel {med(lambda: reduce_parts(part, w_p.detach()), 0.3):.4f} ms; "
                  f"torch sum {med(lambda: part.sum(0), 0.3):.4f}; sum+grad_like "
                  f"{med(lambda: conv1d.grad_like(w_p.detach(), part.sum(0)), 0.3):.4f}", flush=True)
            print(f"{tag} zero-padded dz copy {med(lambda: dz_pad[:, :L_out].copy_(dz), 0.3):.4f} ms", flush=True)
            for cfg in conv1d.DW_CONFIGS:
                try:
                    t_ms = med(lambda: dw_prod_kernel_only(x_cl.detach(), dz, k, cfg), 0.3)
                    print(f"{tag} prod kernel {cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages} {t_ms:.4f} ms", flush=True)
                except Exception as e:
                    print(f"{tag} prod kernel {cfg.kwargs} {type(e).__name__}: {str(e)[:200]}", flush=True)
            print(f"{tag} prod conv1d_weight_grad (tuned, kernel+sum) "
                  f"{med(lambda: conv1d.conv1d_weight_grad(x_cl.detach(), dz, k, C, 'ieee'), 0.3):.4f} ms; "
                  f"call {med(lambda: conv1d.conv1d_weight_grad(x_cl.detach(), dz, k, C, 'ieee'), 0.0):.4f}",
                  flush=True)

        def eager():
            y = functional.relu(functional.conv1d(x, w, b))
            return torch.autograd.grad(y, (x, w, b), dy)

        def ours(d, fast):
            if not fast:
                conv1d_eager._FAST.clear()
            y = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
            return torch.autograd.grad(y, (x_cl, w_p, b), d)

        if not ON_GPU:
            for fast in (False, True):
                ours(dy_cl, fast)
            print("cpu: A/B functions ran", flush=True)
            continue
        variants = {"eager (cuDNN)": eager, "ours fast, dy CL": lambda: ours(dy_cl, True),
                    "ours general, dy CL": lambda: ours(dy_cl, False), "ours fast, dy view": lambda: ours(dy_view, True),
                    "ours general, dy view": lambda: ours(dy_view, False)}
        results = {name: ([], []) for name in variants}
        for rnd in range(3):
            for name, fn in variants.items():
                results[name][0].append(med(fn, 0.0))
                results[name][1].append(med(fn, 0.3))
        for name, (call, kern) in results.items():
            print(f"{tag} {name:24s} call {' '.join(f'{v:.4f}' for v in call)} ms  kernel "
                  f"{' '.join(f'{v:.4f}' for v in kern)} ms", flush=True)
        e = statistics.median(results["eager (cuDNN)"][0])
        for name, (call, _) in results.items():
            print(f"{tag} {name:24s} eager/ours (median of rounds) {e / statistics.median(call):.3f}x", flush=True)
        if L == 110:
            fn = lambda: ours(dy_cl, True)
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                fn()
            torch.cuda.synchronize()
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
            print(s.getvalue()[:6000], flush=True)


if __name__ == "__main__":
    main()
