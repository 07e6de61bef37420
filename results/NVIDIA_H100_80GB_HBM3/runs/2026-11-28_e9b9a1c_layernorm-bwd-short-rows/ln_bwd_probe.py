"""LayerNorm backward at short rows: where the time goes (row kernel, partial sums, host)."""
import json, os, statistics, sys
import torch
from triton_kernels import layernorm
from triton_kernels.layernorm_kernels import _ln_bwd_row_kernel, _sum_rows_kernel
from triton_kernels.launcher import bind
from triton_kernels.runtime import cuda_time_ms, sm_count

out = {}
def med(fn, lead=0.0, rep=60):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))

sms = torch.cuda.get_device_properties(0).multi_processor_count
for (M, D) in [(8192, 1024), (4096, 768), (32768, 512), (8192, 4096), (16384, 8192)]:
    dt = torch.bfloat16
    x = torch.randn(M, D, device="cuda", dtype=dt)
    w = torch.randn(D, device="cuda", dtype=dt)
    b = torch.randn(D, device="cuda", dtype=dt)
    dy = torch.randn(M, D, device="cuda", dtype=dt)
    _, mean, rstd = torch.native_layer_norm(x, [D], w, b, 1e-5)
    _, ms, rs = layernorm.layer_norm_forward(x, w, b, 1e-5, True)
    eager = lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [D], mean, rstd, w, b, [True, True, True])
    ours = lambda: layernorm.layer_norm_backward(dy, x, w, ms, rs, True, True, True)
    ours()
    plan = layernorm._BACKWARD_PLANS[next(k for k in layernorm._BACKWARD_PLANS if k[1] == D and k[0] in (M, (M - 1).bit_length()))]
    r = {"eager_call": med(eager), "ours_call": med(ours), "eager_kernels": med(eager, 0.3), "ours_kernels": med(ours, 0.3)}
    if type(plan).__name__ == "_RowBackward":
        r["plan"] = {"programs": plan.programs, "warps": plan.kernel.options.get("num_warps"), "sum_grid": plan.sum_grid}
        dx = torch.empty_like(x)
        rows = {}
        triton_bd = 1 << (D - 1).bit_length()
        for per_sm in (1, 2, 4, 8):
            for warps in ((2, 4) if D <= 512 else (4, 8)):
                for stages in (1, 2):
                    if D == 768:
                        continue
                    P = min(M, sms * per_sm)
                    parts = torch.empty((P, 2, D), device="cuda", dtype=torch.float32)
                    k = bind(_ln_bwd_row_kernel, HAS_W=True, NEED_DX=True, NEED_PARTS=True, BLOCK_D=triton_bd,
                             num_warps=warps, num_stages=stages)
                    f = lambda: k.launch((P,), x_ptr=x, w_ptr=w, dy_ptr=dy, dx_ptr=dx, mean_ptr=ms, rstd_ptr=rs,
                                         part_ptr=parts, M=M, D=D, stride_xm=D, stride_dym=D, stride_dxm=D, stride_w=1)
                    try:
                        rows[f"{per_sm}/{warps}/{stages}"] = med(f, 0.3)
                    except Exception as e:
                        rows[f"{per_sm}/{warps}/{stages}"] = str(e)[:80]
        r["row_kernel"] = rows
        sums = {}
        for P in ((2 * sms, 8 * sms) if D == 1024 else ()):
            parts = torch.randn((P, 2 * D), device="cuda", dtype=torch.float32)
            o = torch.empty(2 * D, device="cuda", dtype=torch.float32)
            for bn in (16, 32, 64, 128):
                for bp in (16, 32, 64):
                    for warps in (2, 4):
                        k = bind(_sum_rows_kernel, BLOCK_P=bp, BLOCK_N=bn, num_warps=warps)
                        grid = ((2 * D + bn - 1) // bn,)
                        f = lambda: k.launch(grid, part_ptr=parts, out_ptr=o, P=P, N=2 * D)
                        sums[f"{P}/{bn}/{bp}/{warps}"] = med(f, 0.3, rep=30)
        r["sum_kernel"] = sums
    out[f"{M}x{D}"] = r
    print(M, D, {k: v for k, v in r.items() if k not in ("row_kernel", "sum_kernel")}, flush=True)
    if "row_kernel" in r:
        print("  best rows", sorted((v, k) for k, v in r["row_kernel"].items() if isinstance(v, float))[:6])
        if r["sum_kernel"]:
            print("  best sums", sorted((v, k) for k, v in r["sum_kernel"].items())[:6])
            print("  default sums", {k: round(v, 4) for k, v in r["sum_kernel"].items() if k.split("/")[1] == "128" and k.split("/")[2] == "32" and k.endswith("/4")})
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "ln_bwd_probe.json"), "w"), indent=1)
