"""The Char-CNN's fc1 (512 x 8704 -> 1024) and fc2 (512 x 1024 -> 1024) Linear + bias + ReLU forward, bf16: a
wide sweep of the persistent TMA kernel's configs (tiles, BLOCK_K, warps, stages, GROUP_M) against cuBLAS
(linear + relu, replayed from a CUDA graph). Kernel times: CUDA events, L2 flushed, 0.5 ms GPU lead.
SWEEP=2: the second run, fc1 only, 64 x 64 tiles with 5-7 stages and GROUP_M 1-16 (fc_sweep2.json)."""
import json, os, statistics, sys
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator
from triton_kernels.gemm_kernels import _gemm_tma_kernel
from triton_kernels.graphs import capture_graph
OUT = os.environ.get("OUT", "/tmp")
SECOND = os.environ.get("SWEEP") == "2"
_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []


def med(fn, reps=100):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=3, rep=reps, flush_l2=True, lead_ms=0.5)
    return statistics.median(ts)


for name, (M, K, N) in (("fc1", (512, 8704, 1024)),) + (() if SECOND else (("fc2", (512, 1024, 1024)),)):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = torch.relu(functional.linear(x.double(), w.double(), b.double()))
    graph, _ = capture_graph(lambda: torch.relu(functional.linear(x, w, b)), warmup=3)
    cub = med(graph.replay) * 1e3
    print(f"{name}: cuBLAS + relu replayed {cub:.2f} us", flush=True)
    rows.append(dict(case=name, what="cublas_graph", us=cub))
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    cfgs = []
    if SECOND:
        cfgs = [(64, 64, 128, 4, st, gm) for st in (5, 6, 7) for gm in (1, 2, 4, 8, 16)]
        cfgs += [(64, 64, 64, 4, st, 8) for st in (10, 13, 14)]
    else:
        for bm, bn in ((64, 64), (64, 128), (128, 64), (128, 128), (64, 32), (32, 64)):
            for bk in (64, 128, 256):
                for w_ in (4, 8):
                    for st in (3, 4, 6, 8, 12):
                        smem = st * (bm * bk + bk * bn) * 2
                        if smem > 220 * 1024 or bk > K or (w_ == 8 and bm * bn < 128 * 64):
                            continue
                        cfgs.append((bm, bn, bk, w_, st, 8))
    for bm, bn, bk, w_, st, gm in cfgs:
        progs = min(-(-M // bm) * -(-N // bn), SMS)
        def call():
            _gemm_tma_kernel[(progs,)](a_ptr=x, b_ptr=w, c_ptr=c, bias_ptr=b, res_ptr=c, z_ptr=c, M=M, N=N, K=K,
                                       NUM_PROGS=progs, stride_a=K, stride_b=K, stride_cm=N, stride_cn=1, stride_bias=1,
                                       stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0, A_T=False, B_T=True,
                                       HAS_BIAS=True, HAS_RES=False, SAVE_Z=False, ACT="relu", PRECISION="ieee",
                                       INDEX_64=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, PDL=False,
                                       num_warps=w_, num_stages=st)
        try:
            c.fill_(float("nan")); call(); torch.cuda.synchronize()
            err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
            us = med(call) * 1e3
        except Exception as e:
            print("  ", (bm, bn, bk, w_, st, gm), "failed:", str(e).splitlines()[0][:90], flush=True)
            continue
        rows.append(dict(case=name, what="tma", cfg=(bm, bn, bk, w_, st, gm), us=us, err=err))
        print(f"  {(bm, bn, bk, w_, st, gm)}: {us:6.2f} us  {cub / us:.3f}x  err {err:.1e}", flush=True)
json.dump(rows, open(os.path.join(OUT, "fc_sweep2.json" if SECOND else "fc_sweep.json"), "w"), indent=1)
