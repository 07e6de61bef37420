"""LayerNorm backward, eager calls and kernels only (GPU spin before each call), ours vs aten, several shapes."""
import json, os, statistics
import torch
from triton_kernels import layernorm
from triton_kernels.runtime import cuda_time_ms

def med(fn, lead=0.0, rep=100):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))

out = {}
for (M, D) in [(8192, 1024), (16384, 1024), (4096, 768), (2048, 1024), (32768, 512), (8192, 4096), (16384, 8192),
               (1024, 4096)]:
    dt = torch.bfloat16
    x, dy = (torch.randn(M, D, device="cuda", dtype=dt) for _ in range(2))
    w, b = (torch.randn(D, device="cuda", dtype=dt) for _ in range(2))
    _, mean, rstd = torch.native_layer_norm(x, [D], w, b, 1e-5)
    _, ms, rs = layernorm.layer_norm_forward(x, w, b, 1e-5, True)
    eager = lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [D], mean, rstd, w, b, [True, True, True])
    ours = lambda: layernorm.layer_norm_backward(dy, x, w, ms, rs, True, True, True)
    ref = [t.float() for t in eager()]
    got = ours()
    err = [float((g.float() - r).abs().max() / r.abs().max()) for g, r in zip(got, ref)]
    plan = next(p for k, p in layernorm._BACKWARD_PLANS.items() if k[1] == D and k[0] in (M, (M - 1).bit_length()))
    r = {"eager_call": med(eager), "ours_call": med(ours), "eager_kernels": med(eager, 0.3), "ours_kernels": med(ours, 0.3),
         "rel_err_vs_aten": err, "programs": getattr(plan, "programs", None), "sum_grid": plan.sum_grid}
    r["speedup_call"], r["speedup_kernels"] = r["eager_call"] / r["ours_call"], r["eager_kernels"] / r["ours_kernels"]
    out[f"{M}x{D}"] = r
    print(M, D, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "ln_bwd_check.json"), "w"), indent=1)
