"""Which conv2d call goes wrong under torch.compile(fullgraph=True): bias / residual / relu, grad mode or not,
tiled and transposed kernels; the max difference to the eager call (nan: the compiled output has NaN)."""
import torch
from triton_kernels import conv2d

CL = torch.channels_last
for C, H, N in ((64, 16, 64), (512, 4, 512)):
    x = torch.randn(32, C, H, H, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
    w = (torch.randn(N, C, 3, 3, device="cuda") / (9 * C) ** 0.5).to(torch.bfloat16)
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(32, N, H, H, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=CL)
    for bias, res, act in ((False, False, "none"), (True, False, "none"), (False, True, "relu"), (True, True, "relu")):
        for grad in (False, True):
            xs = x.detach().requires_grad_(grad)
            args = (xs, w, b if bias else None, 1, 1, r if res else None, act)
            with torch.set_grad_enabled(grad):
                e = conv2d.conv2d(*args)
                torch._dynamo.reset()
                f = torch.compile(lambda *a: conv2d.conv2d(*a), fullgraph=True)
                c = f(*args)
            d = (c.float() - e.float()).abs().max().item()
            print(f"C={C} H={H} bias={bias} res={res} act={act} grad={grad}: max diff {d:.4g} (nan in compiled: {bool(c.isnan().any())})", flush=True)
