"""Which piece of the triton-backend ResNet-18 computes differently under torch.compile (training mode)?
Each piece: eager output against torch.compile(backend=aot_eager, then inductor), fullgraph."""
import sys, time
import torch
from models.resnet import resnet, Conv2d

CL = torch.channels_last
torch.manual_seed(0)


def build(every):
    torch.manual_seed(0)
    m = resnet("resnet18", backend="triton").cuda().to(memory_format=CL)
    if every:
        for c in m.modules():
            if isinstance(c, Conv2d):
                c.impl = "triton"
    return m


def flat(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def rel(a, b):
    a, b = a.float(), b.float()
    if not torch.isfinite(b).all():
        return f"NONFINITE({(~torch.isfinite(b)).sum().item()})"
    return f"{(a - b).abs().max().item() / max(a.abs().max().item(), 1e-30):.2e}"


def compare(name, fn, *args, amp=False, backends=("aot_eager", "inductor")):
    def call(f):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            return [t.detach().clone() for t in flat(f(*args))]
    try:
        ref = call(fn)
        again = call(fn)
    except Exception as e:
        print(f"{name}: eager {type(e).__name__}: {str(e)[:200]}", flush=True)
        return
    parts = [f"eager-again {' '.join(rel(a, b) for a, b in zip(ref, again))}"]
    for be in backends:
        t = time.time()
        torch._dynamo.reset()
        try:
            got = call(torch.compile(fn, fullgraph=True, backend=be))
            parts.append(f"{be} {' '.join(rel(a, b) for a, b in zip(ref, got))} ({time.time() - t:.0f}s)")
        except Exception as e:
            parts.append(f"{be} {type(e).__name__}: {str(e)[:200]}")
    print(f"{name:40s} | " + " | ".join(parts), flush=True)


m = build(False)
bf = dict(device="cuda", dtype=torch.bfloat16)
x64 = torch.randn(64, 64, 32, 32, **bf).contiguous(memory_format=CL)
r64 = torch.randn(64, 64, 32, 32, **bf).contiguous(memory_format=CL)
b1 = m.layer1[0]
compare("bn relu (layer1.0.bn1)", lambda x: b1.bn1(x), x64)
compare("bn + residual relu (layer1.0.bn2)", lambda x, r: b1.bn2(x, r), x64, r64)
compare("bn two_outputs (stem bn1)", lambda x: m.bn1(x), x64)
x3 = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=CL)
compare("stem conv+bn (amp)", lambda x: m.bn1(m.conv1(x)), x3, amp=True)
compare("layer1.0 block, input pair (amp)", lambda x: b1((x, x)), x64, amp=True)
compare("layer1.0 block, input tensor (amp)", lambda x: b1(x), x64, amp=True)
x512 = torch.randn(64, 512, 4, 4, **bf).contiguous(memory_format=CL)
from triton_kernels import pool_head
compare("pool head", lambda x: pool_head.pool_head(x, m.fc.weight, m.fc.bias), x512)
compare("whole model, cudnn convs (amp)", lambda x: m(x), x3, amp=True)
me = build(True)
compare("whole model, every conv triton (amp)", lambda x: me(x), x3, amp=True)
me.train()

