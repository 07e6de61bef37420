"""Experiment (issue 22): the Char-CNN fc1 Linear+ReLU (512 x 8704 -> 1024, bf16) replayed from CUDA graphs,
cuBLAS vs forced Triton configs (the tuner's current choice first)."""
import sys, statistics, torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import Config, capture_graph, cuda_time_ms

def cfg(bm, bn, bk, w, s, **extra):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, **extra}, w, s)

dev, bf16 = torch.device("cuda"), torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(512, 8704, device=dev, dtype=bf16, generator=g); w = torch.randn(1024, 8704, device=dev, dtype=bf16, generator=g) / 93
b = torch.randn(1024, device=dev, dtype=bf16, generator=g)
ref = torch.relu(torch.nn.functional.linear(x, w, b))

def replayed(fn, rep=100):
    graph, _ = capture_graph(fn)
    return statistics.median(cuda_time_ms(graph.replay, warmup=5, rep=rep)) * 1e3

gemm.linear(x, w, b, "relu"); torch.cuda.synchronize()  # tuned outside the capture
rows = [("cuBLAS + relu", replayed(lambda: torch.relu(torch.nn.functional.linear(x, w, b)))),
        ("ours, tuned", replayed(lambda: gemm.linear(x, w, b, "relu")))]
for c in [cfg(64, 64, 128, 4, s, TMA=1) for s in (4, 5, 6, 7)] + [cfg(64, 64, 64, 4, s, TMA=1) for s in (8, 10, 12)] \
        + [cfg(64, 128, 128, 4, 4, TMA=1), cfg(128, 64, 128, 4, 4, TMA=1), cfg(64, 64, 128, 8, 6, TMA=1),
           cfg(64, 64, 256, 4, 3, TMA=1), cfg(64, 128, 64, 4, 8, TMA=1), cfg(128, 64, 64, 4, 8, TMA=1)]:
    try:
        y = gemm.linear(x, w, b, "relu", config=c); torch.cuda.synchronize()
        err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        rows.append((f"{c.kwargs} w{c.num_warps} s{c.num_stages} (err {err:.1e})",
                     replayed(lambda c=c: gemm.linear(x, w, b, "relu", config=c))))
    except Exception as e:
        print(c, type(e).__name__, str(e)[:100])
base = rows[0][1]
for name, t in sorted(rows, key=lambda r: r[1]):
    print(f"{t:7.2f} us  {base / t:5.3f}x cuBLAS  {name}")
