"""Which cuDNN convolutions of ResNet-18 (batch 512, bf16, channels_last) put a memset node before their
kernel in a CUDA graph, and what each conv's forward + backward costs replayed, under one cuDNN setting.
python probe/conv_memsets.py SETTING  (bench | heur | det | heur-det)"""
import sys, statistics, collections
import torch
import torch.nn.functional as F
from triton_kernels.graphs import capture_graph
from triton_kernels.runtime import cuda_time_ms

setting = sys.argv[1]
torch.backends.cudnn.benchmark = setting in ("bench", "det")
torch.backends.cudnn.deterministic = setting in ("det", "heur-det")
N = 512
LAYERS = [  # name, c_in, c_out, input size, stride, count in the step
    ("l1 64 3x3 s1", 64, 64, 32, 1, 4),
    ("l2a 64->128 s2", 64, 128, 32, 2, 1),
    ("l2 128 s1", 128, 128, 16, 1, 3),
    ("l3a 128->256 s2", 128, 256, 16, 2, 1),
    ("l3 256 s1", 256, 256, 8, 1, 3),
    ("l4a 256->512 s2", 256, 512, 8, 2, 1),
    ("l4 512 s1", 512, 512, 4, 1, 3),
]
REPS = 4
total = 0.0
for name, ci, co, hw, s, count in LAYERS:
    x = torch.randn(N, ci, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(co, ci, 3, 3, device="cuda", dtype=torch.bfloat16) * 0.05).to(memory_format=torch.channels_last)
    x.requires_grad_(True); w.requires_grad_(True)
    g = torch.randn(N, co, hw // s, hw // s, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)

    def step():
        outs = []
        for _ in range(REPS):
            y = F.conv2d(x * 1.0, w, None, s, 1) * 1.0
            outs.append(torch.autograd.grad(y, (x, w), g))
        return outs

    graph, _ = capture_graph(step, warmup=3)
    ms = statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=30, flush_l2=False)) / REPS
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = collections.Counter()
    memsets = 0
    for e in ev:
        if "memset" in e.name.lower():
            memsets += 1
        elif "xmma" in e.name or "nvjet" in e.name or "cudnn" in e.name:
            n = e.name.split("_implicit_gemm")[0].replace("sm90_xmma_", "").replace("sm80_xmma_", "80:")
            tile = e.name.split("tilesize")[1][:10] if "tilesize" in e.name else ""
            names[f"{n}:{tile}"] += 1
    total += ms * count
    print(f"{setting:9s} {name:18s} fwd+bwd {ms * 1e3:7.1f} us  memsets/rep {memsets / REPS:.1f}  "
          + " ".join(f"{k}x{v // REPS}" for k, v in names.items()), flush=True)
    del graph
print(f"{setting:9s} sum over the step's 3x3 convs (x count): {total * 1e3:.1f} us")
