"""Diagnose test_gpu_resnet18_triton_convs: losses of fp32 eager, bf16 eager, bf16 triton (every conv / default
convs), and the same triton models under torch.compile(fullgraph=True); first after a fresh build, then repeated."""
import torch
from torch.nn import functional
from models.resnet import resnet, Conv2d

CL = torch.channels_last
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=CL)
labels = torch.randint(0, 10, (64,), device="cuda")


def step(model, amp):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = functional.cross_entropy(model(x).float(), labels)
    loss.backward()
    return loss.item()


def build(backend, every_conv=False):
    torch.manual_seed(0)
    m = resnet("resnet18", backend=backend).cuda().to(memory_format=CL)
    if every_conv:
        for c in m.modules():
            if isinstance(c, Conv2d):
                c.impl = "triton"
    return m


ref = build("eager")
print("fp32 eager", step(ref, False), "bf16 eager", step(build("eager"), True))
for every in (False, True):
    m = build("triton", every)
    a = step(m, True)
    m.zero_grad(set_to_none=True)
    b = step(m, True)
    torch._dynamo.reset()
    m.zero_grad(set_to_none=True)
    c = step(torch.compile(m, fullgraph=True), True)
    fresh = build("triton", every)
    torch._dynamo.reset()
    d = step(torch.compile(fresh, fullgraph=True), True)
    m2 = build("triton", every).eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        e1 = m2(x).float()
        torch._dynamo.reset()
        e2 = torch.compile(m2, fullgraph=True)(x).float()
    print(f"every_conv={every}: triton bf16 {a:.5f}, again {b:.5f}, compiled after eager {c:.5f}, compiled fresh {d:.5f}; "
          f"eval logits eager vs compiled max diff {(e1 - e2).abs().max().item():.4f} (scale {e1.abs().max().item():.3f})")
