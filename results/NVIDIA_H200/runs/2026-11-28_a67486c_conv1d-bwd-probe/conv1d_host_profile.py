"""cProfile of ours conv1d forward + backward (relu, bias; bf16 B128 L110 k3, dy channels-last), steady eager calls."""
import cProfile, pstats, io
import torch
from triton_kernels import conv1d

B, L, C, N, k = 128, 110, 256, 256, 3
x = torch.randn(B, L, C, device="cuda").bfloat16().requires_grad_()
w = conv1d.pack_weight((torch.randn(N, C, k, device="cuda") / 27).bfloat16()).detach().requires_grad_()
b = torch.randn(N, device="cuda").bfloat16().requires_grad_()
dy = torch.randn(B, L - k + 1, N, device="cuda").bfloat16()


def step():
    y = conv1d.conv1d(x, w, b, "relu", precision="ieee")
    return torch.autograd.grad(y, (x, w, b), dy)


for _ in range(20):
    step()
torch.cuda.synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    step()
torch.cuda.synchronize()
prof.disable()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
print(s.getvalue())
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue())
