"""The widest ResNet-18 batch-norm layer (512x64x32x32 bf16, channels_last): forward + backward a few times, for ncu."""
import torch
from triton_kernels import batchnorm as bn

x = torch.randn(512, 64, 32, 32, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last).requires_grad_()
w = (torch.rand(64, device="cuda") + 0.5).requires_grad_()
b = torch.randn(64, device="cuda").requires_grad_()
rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
for _ in range(4):
    y = bn.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True)
    y.backward(torch.ones_like(y))
torch.cuda.synchronize()
torch.autograd.set_multithreading_enabled(False)  # the backward on this thread, inside the NVTX range
torch.cuda.nvtx.range_push("measure")
y = bn.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True)
y.backward(torch.ones_like(y))
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
