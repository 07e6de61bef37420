"""conv1d_fwdbwd (bench/cases/conv1d.py) at its two bf16 shapes: each output's relative error against float64, eager
(cuDNN) and ours, with cudnn.benchmark off and on; and eager's dw when the weight gradient is taken in fp32."""
import torch
from bench.cases.conv1d import conv1d_case
from triton_kernels.testing import rel_err

for L, k in ((336, 7), (110, 3)):
    case = conv1d_case(128, L, 256, 256, k, torch.bfloat16, mode="fwdbwd")
    for bench_flag in (False, True):
        torch.backends.cudnn.benchmark = bench_flag
        inputs = case.inputs(0, torch.device("cuda"))
        ref = case.reference(*inputs)
        for name, fn in case.fns.items():
            out = fn(*inputs)
            errs = []
            for o, r in zip(out, ref):
                try:
                    errs.append(f"{rel_err(o, r):.2e}")
                except ValueError as e:
                    errs.append(str(e)[:60])
            print(f"L={L} k={k} benchmark={bench_flag} {name:7s} y/dx/dw/db:", errs, flush=True)
