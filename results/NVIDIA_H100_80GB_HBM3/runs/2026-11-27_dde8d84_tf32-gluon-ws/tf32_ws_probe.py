"""tf32 n^3 with B K-major: the warp-specialised Gluon kernels (tf32_ws.py; PROBE=2: also tf32_ws2.py)
against cuBLAS and the production TMA
kernel's best config; max error against float64 on NaN-filled outputs, repeat bit-equality, kernel times (L2
flushed, 0.5 ms GPU lead)."""
import json, os, statistics, sys
sys.path.insert(0, ".")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator
from triton_kernels.gemm_kernels import _gemm_tma_kernel
import tf32_ws
import tf32_ws2
torch.backends.cuda.matmul.allow_tf32 = True
OUT = os.environ.get("OUT", "/tmp")
_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []


def med(fn, reps):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=2, rep=reps, flush_l2=True, lead_ms=0.5)
    return statistics.median(ts) * 1e3


# the first run (box I): tf32_ws.py's kernel; the second (box J, PROBE=2): tf32_ws2.py's two consumer partitions
FIRST = [("ws", dict(block_m=bm, block_n=bn, block_k=bk, stages=st, num_warps=w, group_m=gm))
         for bm, bn, bk, st, w, gm in ((128, 256, 32, 4, 8, 8), (128, 256, 32, 3, 8, 8), (256, 128, 32, 4, 8, 8),
                                       (128, 256, 32, 4, 8, 16), (128, 128, 32, 6, 4, 8), (128, 256, 16, 8, 8, 8))]
SECOND = [("ws", dict(block_m=128, block_n=256, block_k=32, stages=4, group_m=16, num_warps=8)),
          ("ws2", dict(block_n=256, block_k=32, stages=4, group_m=8)),
          ("ws2", dict(block_n=256, block_k=32, stages=4, group_m=16)),
          ("ws2", dict(block_n=256, block_k=32, stages=3, group_m=16)),
          ("ws2", dict(block_n=256, block_k=32, stages=4, group_m=16, consumer_regs=240))]
PROBE2 = os.environ.get("PROBE") == "2"
VARIANTS = SECOND if PROBE2 else FIRST
for n in (4096, 8192):
    reps = 20 if n == 8192 else 50
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g)
    b_nk = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b_nk.double().t()
    scale = exact.abs().max().item()
    c = torch.empty(n, n, device="cuda")
    cub = med(lambda: torch.mm(a, b_nk.t(), out=c), reps)
    cub_err = (c.double() - exact).abs().max().item() / scale
    def prod():
        _gemm_tma_kernel[(SMS,)](a_ptr=a, b_ptr=b_nk, c_ptr=c, bias_ptr=c, res_ptr=c, z_ptr=c, M=n, N=n, K=n,
                                 NUM_PROGS=SMS, stride_a=n, stride_b=n, stride_cm=n, stride_cn=1, stride_bias=0,
                                 stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0, A_T=False, B_T=True,
                                 HAS_BIAS=False, HAS_RES=False, SAVE_Z=False, ACT="none", PRECISION="tf32",
                                 INDEX_64=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, PDL=False,
                                 num_warps=8, num_stages=4)
    prod(); torch.cuda.synchronize()
    prod_err = (c.double() - exact).abs().max().item() / scale
    prod_us = med(prod, reps)
    print(f"n={n}: cuBLAS {cub:.1f} us (err {cub_err:.1e}); production TMA kernel {prod_us:.1f} us "
          f"({cub / prod_us:.3f}x, err {prod_err:.1e})", flush=True)
    rows += [dict(n=n, what="cublas", us=cub, err=cub_err), dict(n=n, what="production", us=prod_us, err=prod_err)]
    for name, kw in VARIANTS:
        mod = tf32_ws if name == "ws" else tf32_ws2
        call = lambda: mod.launch(a, b_nk, c, **kw)
        try:
            outs, errs = [], []
            for _ in range(4):
                c.fill_(float("nan")); call(); torch.cuda.synchronize()
                errs.append((c.double() - exact).abs().max().item() / scale); outs.append(c.clone())
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            del outs
            us = med(call, reps)
        except Exception as e:  # noqa: BLE001
            print("  ", name, kw, "failed:", type(e).__name__, str(e)[:300], flush=True)
            continue
        rows.append(dict(n=n, what=name, cfg=kw, us=us, err=max(errs), same=same))
        print(f"  {name} {kw}: {us:8.1f} us  {cub / us:.3f}x cuBLAS  err {max(errs):.1e}  repeat-equal {same}", flush=True)
    del a, b_nk, exact, c
    torch.cuda.empty_cache()
json.dump(rows, open(os.path.join(OUT, "tf32_ws_probe2.json" if PROBE2 else "tf32_ws_probe.json"), "w"), indent=1)
