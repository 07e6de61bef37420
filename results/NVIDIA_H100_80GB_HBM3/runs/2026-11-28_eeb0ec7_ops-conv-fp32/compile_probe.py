"""Why a compiled conv (precision=None) did not give the ieee result after cudnn.allow_tf32 = False."""
import torch
from torch._dynamo.utils import counters
from triton_kernels import conv2d
from triton_kernels.testing import cudnn_tf32

g = torch._C._get_fp32_precision_getter
x = torch.randn(16, 64, 16, 16, device="cuda").contiguous(memory_format=torch.channels_last)
w = torch.randn(96, 64, 3, 3, device="cuda") / 24
with torch.no_grad():
    by = {p: conv2d.conv2d(x, w, None, 1, 1, precision=p) for p in ("ieee", "tf32")}
    print("ieee vs tf32 max diff", (by["ieee"] - by["tf32"]).abs().max().item())
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: conv2d.conv2d(x, w, None, 1, 1), fullgraph=True)
    for allow in (True, False, True, False):
        with cudnn_tf32(allow):
            conv2d._PLANS.clear()
            e = conv2d.conv2d(x, w, None, 1, 1)
            c = compiled(x, w)
            print("allow", allow, "getter", g("cuda", "conv"), "plans", [k[0].precision for k in conv2d._PLANS],
                  "eager==ieee", torch.equal(e, by["ieee"]), "eager==tf32", torch.equal(e, by["tf32"]),
                  "comp==ieee", torch.equal(c, by["ieee"]), "comp==tf32", torch.equal(c, by["tf32"]),
                  "comp-ieee", (c - by["ieee"]).abs().max().item(), "comp strides", c.stride(),
                  "graphs", dict(counters["stats"]), flush=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: conv2d.conv2d(x, w, None, 1, 1), fullgraph=True, backend="aot_eager")
    for allow in (True, False):
        with cudnn_tf32(allow):
            c = compiled(x, w)
            print("aot_eager allow", allow, "comp==ieee", torch.equal(c, by["ieee"]), "comp==tf32", torch.equal(c, by["tf32"]))
