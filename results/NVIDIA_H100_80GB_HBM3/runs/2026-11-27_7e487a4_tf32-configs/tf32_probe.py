"""tf32 GEMM n^3 (n = 4096, 8192) on the persistent TMA kernel, B K-major (nn.Linear's weight; the copy of an
N-major B): a wider config sweep than the tuner's list (16 warps, GROUP_M, stages, BLOCK_K 64), against
cuBLAS on N-major and K-major B; the copy of B (gemm.relayout) timed alone. Kernel times: CUDA events, L2
flushed, 0.5 ms GPU lead."""
import itertools, json, os, statistics, sys
sys.path.insert(0, ".")
import torch
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator, relayout
from triton_kernels.gemm_kernels import _gemm_tma_kernel
torch.backends.cuda.matmul.allow_tf32 = True
OUT = os.environ.get("OUT", "/tmp")
_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []


def med(fn, reps):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=2, rep=reps, flush_l2=True, lead_ms=0.5)
    return statistics.median(ts)


for n in (4096, 8192):
    reps = 30 if n == 8192 else 60
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)  # (K, N) row-major: N-major
    bt = b.t().contiguous()                             # (N, K): K-major
    ref = (a.double() @ b.double())
    c = torch.empty(n, n, device="cuda")
    cub_n = med(lambda: torch.mm(a, b, out=c), reps)
    cub_k = med(lambda: torch.mm(a, bt.t(), out=c), reps)
    copy = med(lambda: relayout(b), reps)
    print(f"n={n} cuBLAS N-major {cub_n*1e3:.1f} us, K-major {cub_k*1e3:.1f} us, copy of B {copy*1e3:.1f} us", flush=True)
    rows.append(dict(n=n, what="cublas", b="N-major", us=cub_n * 1e3)); rows.append(dict(n=n, what="cublas", b="K-major", us=cub_k * 1e3))
    rows.append(dict(n=n, what="copy", us=copy * 1e3))
    cfgs = [(bm, bn, bk, w, s, gm) for (bm, bn, bk) in ((128, 256, 32), (256, 128, 32), (128, 128, 32), (128, 256, 16),
                                                          (256, 128, 16), (128, 128, 64))
            for w in (8, 16) for s in (3, 4, 5, 6) for gm in (8,)
            if s * (bm * bk + bk * bn) * 4 <= 227 * 1024 and not (bm * bn == 128 * 128 and w == 16)]
    for bm, bn, bk, w, s, gm in cfgs:
        progs = min((n // bm) * (n // bn), SMS)
        def call():
            _gemm_tma_kernel[(progs,)](a_ptr=a, b_ptr=bt, c_ptr=c, bias_ptr=c, res_ptr=c, z_ptr=c, M=n, N=n, K=n,
                                       NUM_PROGS=progs, stride_a=n, stride_b=n, stride_cm=n, stride_cn=1, stride_bias=0,
                                       stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0, A_T=False, B_T=True,
                                       HAS_BIAS=False, HAS_RES=False, SAVE_Z=False, ACT="none", PRECISION="tf32",
                                       INDEX_64=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, PDL=False,
                                       num_warps=w, num_stages=s)
        try:
            c.fill_(float("nan")); call(); torch.cuda.synchronize()
            err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
            us = med(call, reps) * 1e3
        except Exception as e:
            print(" ", (bm, bn, bk, w, s, gm), "failed:", str(e).splitlines()[0][:100], flush=True)
            continue
        rows.append(dict(n=n, what="tma", cfg=(bm, bn, bk, w, s, gm), us=us, err=err))
        print(f"  {(bm, bn, bk, w, s, gm)}: {us:8.1f} us  K-major {cub_k * 1e3 / us:.3f}x  with copy vs N-major "
              f"{cub_n * 1e3 / (us + copy * 1e3):.3f}x  err {err:.1e}", flush=True)
json.dump(rows, open(os.path.join(OUT, "tf32_probe.json"), "w"), indent=1)
