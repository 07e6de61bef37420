"""fp32 conv2d at tf32: the tiled kernel's kernel time with the weight N-major (KH, KW, C_in, C_out) contiguous,
as before) against K-major (the same shape over (C_out, KH, KW, C_in) memory), and cuDNN's TF32, one process."""
import json, os, statistics
import torch
from torch.nn import functional
from triton_kernels import conv2d
from triton_kernels.runtime import cuda_time_ms

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
out = {}
def med(fn, lead=0.3):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=40, lead_ms=lead))
for C, H, N in [(64, 32, 64), (128, 16, 128), (256, 8, 256), (512, 4, 512)]:
    x = torch.randn(512, C, H, H, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(N, C, 3, 3, device="cuda") / (9 * C) ** 0.5
    n_major = conv2d.pack_weight(w)
    k_major = conv2d.pack_weight(w, transposed=True).permute(1, 2, 3, 0)
    ref = functional.conv2d(x, w, None, 1, 1)
    r = {}
    for name, wl in (("n_major", n_major), ("k_major", k_major)):
        y = conv2d.conv2d_forward(x, wl, None, None, (1, 1), (1, 1), precision="tf32")
        r[name + "_err"] = ((y - ref).norm() / ref.norm()).item()
        r[name + "_kernel_ms"] = med(lambda: conv2d.conv2d_forward(x, wl, None, None, (1, 1), (1, 1), precision="tf32"))
    r["cudnn_kernel_ms"] = med(lambda: functional.conv2d(x, w, None, 1, 1))
    r["cudnn_call_ms"] = med(lambda: functional.conv2d(x, w, None, 1, 1), 0.0)
    with torch.no_grad():
        r["ours_default_call_ms"] = med(lambda: conv2d.conv2d(x, w, None, 1, 1), 0.0)
    r["plan"] = [str(v) for k, v in conv2d._PLANS.items() if k[0].c == C and k[0].precision == "tf32"][:1]
    out[f"{C}x{H}x{H}->{N}"] = r
    print(C, H, N, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "tf32_layout_probe.json"), "w"), indent=1)
