"""Bisect the NaN of the every-conv-on-Triton ResNet-18 under torch.compile (training, bf16 autocast): the
compiled loss with the Triton conv2d on one group of layers at a time."""
import torch
from torch.nn import functional
from models.resnet import resnet, Conv2d

CL = torch.channels_last
x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=CL)
labels = torch.randint(0, 10, (64,), device="cuda")
groups = {"3x3 stride 2": lambda c: c.kernel_size[0] == 3 and c.stride[0] == 2,
          "1x1 downsample": lambda c: c.kernel_size[0] == 1,
          "3x3 stride 1, 64-256": lambda c: c.kernel_size[0] == 3 and c.stride[0] == 1 and 3 < c.in_channels < 512,
          "3x3 stride 1, 512": lambda c: c.kernel_size[0] == 3 and c.stride[0] == 1 and c.in_channels == 512}
for name, pick in groups.items():
    torch.manual_seed(0)
    m = resnet("resnet18", backend="triton").cuda().to(memory_format=CL)
    for c in m.modules():
        if isinstance(c, Conv2d) and pick(c):
            c.impl = "triton"
    with torch.autocast("cuda", dtype=torch.bfloat16):
        eager = functional.cross_entropy(m(x).float(), labels).item()
        torch._dynamo.reset()
        out = torch.compile(m, fullgraph=True)(x).float()
        comp = functional.cross_entropy(out, labels).item()
    print(f"{name:24s} eager {eager:.5f} compiled {comp:.5f} nan logits {int(out.isnan().any(1).sum())}/64", flush=True)
