"""Probe: why the bf16 1024^3 (and 512^3) square GEMM runs at ~0.87x cuBLAS, and which config would win.

For each shape: cuBLAS (torch.matmul) and ours tuned, then every forced config below, each timed as kernel time
(GPU spin ahead, L2 flushed) and as an eager call (L2 flushed), medians of interleaved rounds. Outputs checked
against cuBLAS's (bf16 rounding). Prints one JSON line per (shape, variant).
"""
import json
import statistics
import sys

import torch

from autotune.spaces import _gemm_cfg
from triton_kernels import gemm
from triton_kernels.runtime import Config, cuda_time_ms



def tma(bm, bn, bk, w, s, group=8):
    c = _gemm_cfg(bm, bn, bk, w, s, group)
    return Config({**c.kwargs, "TMA": 1}, w, s)


def split(bm, bn, bk, w, s, k):
    c = _gemm_cfg(bm, bn, bk, w, s)
    return Config({**c.kwargs, "SPLIT_K": k}, w, s)


VARIANTS = {
    "tma128x64x64w4s4": tma(128, 64, 64, 4, 4), "tma64x128x64w4s4": tma(64, 128, 64, 4, 4),
    "tma128x128x64w8s4": tma(128, 128, 64, 8, 4), "tma128x128x64w4s4": tma(128, 128, 64, 4, 4),
    "tma64x64x128w4s6": tma(64, 64, 128, 4, 6), "tma64x64x64w4s12": tma(64, 64, 64, 4, 12),
    "tma128x64x128w4s3": tma(128, 64, 128, 4, 3), "tma64x128x128w4s3": tma(64, 128, 128, 4, 3),
    "tma128x128x128w8s3": tma(128, 128, 128, 8, 3), "tma64x64x64w4s4": tma(64, 64, 64, 4, 4),
    "tma128x64x64w4s6": tma(128, 64, 64, 4, 6), "tma128x128x64w8s3": tma(128, 128, 64, 8, 3),
    "tma128x256x64w8s3": tma(128, 256, 64, 8, 3), "tma64x256x64w4s4": tma(64, 256, 64, 4, 4),
    "tma128x64x64w4s4g1": tma(128, 64, 64, 4, 4, 1), "tma128x128x64w8s4g1": tma(128, 128, 64, 8, 4, 1),
    "ptr128x128x64w8s4": _gemm_cfg(128, 128, 64, 8, 4), "ptr128x64x64w4s4": _gemm_cfg(128, 64, 64, 4, 4),
    "ptr64x128x64w4s4": _gemm_cfg(64, 128, 64, 4, 4), "ptr128x128x64w4s4": _gemm_cfg(128, 128, 64, 4, 4),
    "split2_128x128x64w8s3": split(128, 128, 64, 8, 3, 2), "split4_128x128x64w8s3": split(128, 128, 64, 8, 3, 4),
    "split2_64x128x64w4s4": split(64, 128, 64, 4, 4, 2),
}
# second call: the pipeline depths of the narrow tiles (cuBLAS's 1024^3 kernel: 128 x 64 x 64, 8 stages)
DEEP = {"tma64x64x128w4s6": tma(64, 64, 128, 4, 6), "tma128x64x64w4s4": tma(128, 64, 64, 4, 4)}
for _bm, _bn in ((128, 64), (64, 128)):
    for _w in (4, 8):
        for _s in (5, 6, 7, 8):
            DEEP[f"tma{_bm}x{_bn}x64w{_w}s{_s}"] = tma(_bm, _bn, 64, _w, _s)
    DEEP[f"tma{_bm}x{_bn}x128w4s4"] = tma(_bm, _bn, 128, 4, 4)
DEEP["tma128x64x64w4s8g1"] = tma(128, 64, 64, 4, 8, 1)
DEEP["tma128x64x64w4s8g4"] = tma(128, 64, 64, 4, 8, 4)
DEEP["tma128x128x64w4s6"] = tma(128, 128, 64, 4, 6)


def med(xs):
    return statistics.median(xs)


def main(sizes, variants=VARIANTS, linear=False):
    for n in sizes:
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
        b = b.t() if linear else b  # linear: B K-major, nn.Linear's weight.t()
        ref = torch.matmul(a, b).float()
        scale = ref.abs().max().item()
        fns = {"cublas": lambda: torch.matmul(a, b), "tuned": lambda: gemm.gemm(a, b)}
        for name, cfg in variants.items():
            fns[name] = (lambda cfg=cfg: gemm.gemm(a, b, config=cfg))
        ok = {}
        for name, fn in fns.items():
            try:
                out = fn()
                torch.cuda.synchronize()
                ok[name] = (out.float() - ref).abs().max().item() / scale
            except Exception as e:  # a config the shape cannot take
                print(json.dumps({"n": n, "variant": name, "error": f"{type(e).__name__}: {str(e)[:160]}"}), flush=True)
        plan = gemm.find_plan(a, b, torch.empty(n, n, device="cuda", dtype=torch.bfloat16), None, None, None,
                              "none", "ieee", False)
        print(json.dumps({"n": n, "tuned_plan": str(plan.kernel), "programs": plan.programs, "bm": plan.block_m,
                          "bn": plan.block_n, "split_k": plan.split_k}), flush=True)
        kern = {k: [] for k in ok}
        call = {k: [] for k in ok}
        for _ in range(7):
            for k in ok:
                kern[k] += cuda_time_ms(fns[k], warmup=2, rep=30, lead_ms=0.05)
                call[k] += cuda_time_ms(fns[k], warmup=2, rep=30)
        base_k, base_c = med(kern["cublas"]), med(call["cublas"])
        for k in ok:
            print(json.dumps({"n": n, "linear": linear, "variant": k, "kernel_us": round(med(kern[k]) * 1e3, 2),
                              "call_us": round(med(call[k]) * 1e3, 2),
                              "vs_cublas_kernel": round(base_k / med(kern[k]), 3),
                              "vs_cublas_call": round(base_c / med(call[k]), 3), "err": ok[k]}), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    deep = "--deep" in args
    sizes = [int(s) for s in args if s.isdigit()] or [512, 1024, 2048]
    main(sizes, DEEP if deep else VARIANTS, linear="--linear" in args)
