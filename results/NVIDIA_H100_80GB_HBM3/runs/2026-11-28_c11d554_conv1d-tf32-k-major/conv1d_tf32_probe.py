"""conv1d at tf32 (Char-CNN conv2, 512 x 336 x 256 -> 256, k 7, + ReLU + pool 3): the kernel with the weight
N-major ((k, C_in, C_out) memory, pack_weight's) against K-major ((C_out, k, C_in) memory), same plan, one
process; cuDNN's TF32; the default call (which copies an N-major weight to K-major first)."""
import json, os, statistics
import torch
from torch.nn import functional
from triton_kernels import conv1d
from triton_kernels.runtime import cdiv, cuda_time_ms

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
def med(fn, lead=0.3):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=40, lead_ms=lead))
out = {}
for B, L, C, N, k, pool in [(512, 336, 256, 256, 7, 3), (512, 336, 256, 256, 7, 1), (512, 110, 256, 256, 3, 1)]:
    x = torch.randn(B, L, C, device="cuda")
    w = torch.randn(N, C, k, device="cuda") / (C * k) ** 0.5
    b = torch.randn(N, device="cuda")
    n_major = conv1d.pack_weight(w)
    k_major = w.permute(0, 2, 1).contiguous().permute(0, 2, 1)
    with torch.no_grad():
        y = conv1d.conv1d(x, n_major, b, "relu", pool, "tf32")
    plan = next(v for kk, v in conv1d._PLANS.items() if kk[0].precision == "tf32" and kk[0].c == C
                and kk[0].kernel_size == k and kk[0].pool == pool and not kk[2])
    LP = (L - k + 1) // pool
    M = B * LP
    grid = (cdiv(M, plan.block_m) * cdiv(N, plan.block_n),)
    def run(wl):
        plan.kernel.launch(grid, x_ptr=x, w_ptr=wl, bias_ptr=b, y_ptr=y, M=M, N=N, C=C, L_in=L, LP=LP, PAD=0,
                           stride_xb=x.stride(0), stride_xl=x.stride(1), stride_xc=x.stride(2),
                           stride_wn=wl.stride(0), stride_wc=wl.stride(1), stride_wt=wl.stride(2),
                           stride_bias=1, stride_yb=y.stride(0), stride_yl=y.stride(1), stride_yn=y.stride(2))
    r = {"n_major_kernel_ms": med(lambda: run(n_major)), "k_major_kernel_ms": med(lambda: run(k_major))}
    ref = functional.conv1d(x.transpose(1, 2), w, b)
    ref = functional.relu(ref)
    ref = functional.max_pool1d(ref, pool, pool) if pool > 1 else ref
    run(k_major)
    r["k_major_err"] = ((y.transpose(1, 2) - ref).norm() / ref.norm()).item()
    def cudnn():
        z = functional.relu(functional.conv1d(x.transpose(1, 2), w, b))
        return functional.max_pool1d(z, pool, pool) if pool > 1 else z
    r["cudnn_kernels_ms"] = med(cudnn)
    r["copy_ms"] = med(lambda: n_major.movedim(1, -1).contiguous(), 0.3)
    with torch.no_grad():
        r["ours_default_call_ms"] = med(lambda: conv1d.conv1d(x, n_major, b, "relu", pool), 0.0)
        r["cudnn_call_ms"] = med(cudnn, 0.0)
    out[f"{B}x{L}x{C}->{N} k{k} pool{pool}"] = r
    print(B, L, C, N, k, pool, {kk: round(v, 5) for kk, v in r.items()}, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "conv1d_tf32_probe.json"), "w"), indent=1)
