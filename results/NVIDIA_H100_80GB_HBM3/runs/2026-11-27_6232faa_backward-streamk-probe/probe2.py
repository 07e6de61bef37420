"""Why stream-K runs slow: its main loop alone (MODE 1), + partial stores (MODE 2), whole (MODE 0), against the
persistent TMA kernel with the same tile, at 132 programs and at a count that gives every program whole tiles."""
import json, os, sys
import torch
import triton
sys.path.insert(0, os.path.dirname(__file__))
from streamk_probe import kernel_us
from sk_variants import streamk_variant
from triton_kernels import gemm
from triton_kernels.gemm_kernels import _gemm_tma_kernel
from triton_kernels.launcher import bind

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
res = {}


def launch_args(a, b, c, progs, part=None, count=None):
    M, K = a.shape
    N = b.shape[1]
    a_t, b_t = a.stride(0) == 1, b.stride(0) == 1
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=c, res_ptr=c, z_ptr=c, M=M, N=N, K=K, NUM_PROGS=progs,
                stride_a=a.stride(1) if a_t else a.stride(0), stride_b=b.stride(1) if b_t else b.stride(0),
                stride_cm=c.stride(0), stride_cn=c.stride(1), stride_bias=0, stride_rm=0, stride_rn=0, stride_zm=0,
                stride_zn=0)
    if part is not None:
        args.update(part_ptr=part, count_ptr=count)
    return a_t, b_t, args


def main():
    gemm._ensure_allocator()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (M, K, N) in {"fc1": (512, 8704, 1024), "big": (4096, 8704, 1024)}.items():
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5
        dz = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=g)
        for prod, (a, b) in {"dX": (dz, w), "dW": (dz.t(), x)}.items():
            key = f"{name}/{prod}"
            row = res[key] = {}
            Mo, No = a.shape[0], b.shape[1]
            c = torch.empty((Mo, No), device=dev, dtype=torch.bfloat16)
            plan = gemm.find_plan(a, b, c, None, None, None, "none", "ieee", False)
            row["tuned_plan"] = f"{plan.kernel.kernel.fn.__name__ if hasattr(plan.kernel.kernel, 'fn') else plan.kernel.kernel} {plan.kernel.constexprs} {plan.kernel.options} progs {plan.programs} split {plan.split_k}"
            print(key, row["tuned_plan"], flush=True)
            row["tuned"] = kernel_us(lambda: gemm.gemm(a, b))
            row["cublas"] = kernel_us(lambda: torch.mm(a, b))
            for (BM, BN, BK, warps, stages) in ((128, 256, 64, 8, 4), (128, 128, 64, 8, 5)):
                tiles = triton.cdiv(Mo, BM) * triton.cdiv(No, BN)
                whole_progs = max(d for d in range(1, sms + 1) if tiles % d == 0)  # every program: whole tiles
                for progs in sorted({sms, whole_progs}):
                    a_t, b_t, args = launch_args(a, b, c, progs)
                    tma = bind(_gemm_tma_kernel, A_T=a_t, B_T=b_t, HAS_BIAS=False, HAS_RES=False, SAVE_Z=False,
                               ACT="none", PRECISION="ieee", INDEX_64=False, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                               GROUP_M=8, PDL=False, num_warps=warps, num_stages=stages)
                    label = f"{BM}x{BN}x{BK} w{warps} s{stages} p{progs}"
                    row["persistent " + label] = kernel_us(lambda: tma.launch((min(progs, tiles),), **args))
                    part = torch.empty(2 * progs * BM * BN, device=dev, dtype=torch.float32)
                    count = torch.zeros(tiles, device=dev, dtype=torch.int32)
                    _, _, sargs = launch_args(a, b, c, progs, part, count)
                    for mode in (1, 2, 0):
                        sk = bind(streamk_variant, A_T=a_t, B_T=b_t, HAS_BIAS=False, HAS_RES=False, SAVE_Z=False,
                                  ACT="none", PRECISION="ieee", INDEX_64=False, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                                  GROUP_M=8, MODE=mode, num_warps=warps, num_stages=stages)
                        row[f"streamk mode{mode} " + label] = kernel_us(lambda: sk.launch((progs,), **sargs))
                    print(key, label, {k: round(v, 2) for k, v in row.items() if label in k}, flush=True)
            print(key, "tuned", round(row["tuned"], 2), "cublas", round(row["cublas"], 2), flush=True)
            with open(os.path.join(OUT, "probe2.json"), "w") as f:
                json.dump(res, f, indent=1)


main()
