"""Localise the NaN of the compiled every-conv-on-Triton ResNet-18 training forward: compiler stages, inductor
options, and the first intermediate activation that goes wrong."""
import glob, os, shutil, sys, time
import torch
import torch._inductor.config as ic
from torch import nn
from models.resnet import resnet, Conv2d

CL = torch.channels_last
OUT = os.environ.get("OUT", "/tmp/out")
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=CL)


def build(every=True):
    torch.manual_seed(0)
    m = resnet("resnet18", backend="triton").cuda().to(memory_format=CL)
    if every:
        for c in m.modules():
            if isinstance(c, Conv2d):
                c.impl = "triton"
    return m


class Taps(nn.Module):
    """The model's forward returning every block's output (stem, 8 blocks, logits)."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        m, outs = self.m, []
        x = m.bn1(m.conv1(x)); outs.append(x)
        for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
            for block in layer:
                x = block(x); outs.append(x)
        from triton_kernels import pool_head
        outs.append(pool_head.pool_head(x, m.fc.weight, m.fc.bias))
        return outs


def run(model):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    return out if isinstance(out, list) else [out]


def report(name, ref, got):
    parts = []
    for i, (a, b) in enumerate(zip(ref, got)):
        a, b = a.float(), b.float()
        nan = (~torch.isfinite(b)).sum().item()
        parts.append(f"{i}:{'NaN%d' % nan if nan else '%.3g' % ((a - b).abs().max().item() / a.abs().max().item())}")
        if len(ref) > 1 and nan:
            print(f"   first non-finite at output {i}: shape {tuple(b.shape)} strides {b.stride()}; eager strides {a.stride()}")
            break
    print(f"{name:48s} {' '.join(parts)}", flush=True)


def variant(name, every=True, backend="inductor", taps=False, **cfg):
    t = time.time()
    m = build(every)
    mod = Taps(m) if taps else m
    ref = run(mod)
    torch._dynamo.reset()
    with ic.patch(cfg):
        got = run(torch.compile(mod, fullgraph=True, backend=backend))
    report(f"{name} ({time.time() - t:.0f} s)", ref, got)


which = sys.argv[1:] or ["all"]
V = {
    "default": dict(),
    "aot_eager": dict(backend="aot_eager"),
    "aot_eager_decomp": dict(backend="aot_eager_decomp_partition"),
    "force_layout_opt": dict(force_layout_optimization=True),
    "cudnn_convs_no_layout_opt": dict(every=False, layout_optimization=False),
    "no_buffer_reuse": dict(allow_buffer_reuse=False),
    "no_padding": dict(comprehensive_padding=False),
    "taps": dict(taps=True),
}
for name, kw in V.items():
    if "all" in which or name in which:
        try:
            variant(name, **kw)
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
# keep the generated code of one default compile for reading offline
cache = glob.glob("/tmp/torchinductor_*")
os.makedirs(f"{OUT}/code", exist_ok=True)
n = 0
for d in cache:
    for f in glob.glob(f"{d}/**/*.py", recursive=True):
        try:
            s = open(f).read()
        except Exception:
            continue
        if "_conv2d_kernel" in s and "def call(" in s:
            shutil.copy(f, f"{OUT}/code/{n}_{os.path.basename(f)}"); n += 1
print("output code files kept:", n)
